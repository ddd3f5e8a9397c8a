//! Causal self-attention on flex in inference, fused: softmax(q·kᵀ/√d_h, keys j ≤ i)·V read
//! straight from the packed Q|K|V projection [B, T, 3d] and written straight into [B, T, d].
//!
//! Why a kernel of our own: through Burn's ops, flex copies Q, K and V into [B, H, T, d_h] and
//! the output back (`copy_2d_tiled`), computes every score of the square, the masked half too,
//! and runs the softmax one element at a time with a branch per element and libm's `expf`; at
//! the quick shape that was a third of a forward. Here the two products go to `gemm` (flex's
//! own matmul) with strides that address the heads inside the packed rows, per block of query
//! rows so that a block multiplies only the keys it can see, and the softmax is a vectorised
//! pass. The extended sparse mode's kept queries run through the same kernel
//! ([`causal_attention_kept`]). Training keeps Burn's attention (its backward comes with it), as
//! do the KV-cache path, the browser and every other device.

use burn::tensor::{DType, Tensor, TensorData};
use gemm::{Parallelism, gemm};
use rayon::prelude::*;

use crate::flex_kernel::{exp, is_flex};

/// Whether the kernels here serve `x`'s device and dtype: f32 on flex, outside autodiff.
pub fn applies<const D: usize>(x: &Tensor<D>) -> bool {
    let device = x.device();
    x.dtype() == DType::F32 && is_flex(&device) && !device.is_autodiff()
}

/// Queries per task: a block of queries multiplies only the keys up to its last one, so smaller
/// blocks skip more of the masked triangle, at one pair of `gemm` calls each.
const BLOCK: usize = 32;

/// Vector lanes of the softmax's reductions (one AVX-512 register).
const LANES: usize = 16;

/// Causal multi-head attention of the packed projection `qkv` [B, T, 3d] (Q | K | V, heads
/// consecutive within each) → [B, T, d], heads concatenated: Burn's
/// `attention(q, k, v, None, None, is_causal)` for queries that are their own keys.
pub fn causal_attention(qkv: Tensor<3>, n_heads: usize) -> Tensor<3> {
    let (device, [b, t, three_d]) = (qkv.device(), qkv.dims());
    let d = three_d / 3;
    assert_eq!(
        three_d % 3,
        0,
        "a packed Q|K|V projection is 3d wide, not {three_d}"
    );
    check_heads(d, n_heads);
    let qkv = host(qkv);
    let view = |col| View {
        data: &qkv,
        stride: three_d,
        col,
    };
    let out = run(
        view(0),
        view(d),
        view(2 * d),
        &Queries::All { b },
        t,
        d,
        n_heads,
    );
    Tensor::from_data(TensorData::new(out, [b, t, d]), &device)
}

/// The extended sparse mode's attention (`sparse::add_attention_rows`): only the kept queries
/// `q` [k, d], sequence by sequence at the positions `positions[s]` (ascending), attend to the
/// keys and values of every token, `kv` [B, T, 2d] (K | V) → [k, d], rows in `q`'s order.
pub fn causal_attention_kept(
    q: Tensor<2>,
    kv: Tensor<3>,
    positions: &[Vec<i64>],
    n_heads: usize,
) -> Tensor<2> {
    let (device, [b, t, two_d], [k, d]) = (q.device(), kv.dims(), q.dims());
    check_heads(d, n_heads);
    assert!(
        two_d == 2 * d && positions.len() == b,
        "K|V [{b}, {t}, {two_d}] for queries of width {d}"
    );
    let counts: Vec<usize> = positions.iter().map(Vec::len).collect();
    assert_eq!(
        counts.iter().sum::<usize>(),
        k,
        "a query row per kept position"
    );
    assert!(
        positions.iter().all(|p| {
            p.windows(2).all(|w| w[0] < w[1]) && p.iter().all(|&i| 0 <= i && (i as usize) < t)
        }),
        "kept positions must ascend within 0..{t}"
    );
    let (q, kv) = (host(q), host(kv));
    let queries = Queries::Kept {
        positions,
        first: starts(&counts),
    };
    let kv_view = |col| View {
        data: &kv,
        stride: two_d,
        col,
    };
    let q_view = View {
        data: &q,
        stride: d,
        col: 0,
    };
    let out = run(q_view, kv_view(0), kv_view(d), &queries, t, d, n_heads);
    Tensor::from_data(TensorData::new(out, [k, d]), &device)
}

fn check_heads(d: usize, n_heads: usize) {
    assert!(
        n_heads > 0 && d > 0 && d.is_multiple_of(n_heads),
        "width {d} is not a multiple of {n_heads} heads"
    );
}

/// A tensor's values, row-major; a buffer flex owns alone is handed over without a copy.
fn host<const D: usize>(x: Tensor<D>) -> Vec<f32> {
    x.into_data()
        .try_into_vec::<f32>()
        .expect("`applies` admits f32 tensors only")
}

/// Running sums: where each sequence's rows start.
fn starts(counts: &[usize]) -> Vec<usize> {
    counts
        .iter()
        .scan(0, |n, &c| {
            let at = *n;
            *n += c;
            Some(at)
        })
        .collect()
}

/// A matrix inside a row-major buffer: element (row, c) at `data[row · stride + col + c]`.
#[derive(Clone, Copy)]
struct View<'a> {
    data: &'a [f32],
    stride: usize,
    col: usize,
}

/// Which queries run, and where their rows are in Q and in the output.
enum Queries<'a> {
    /// Every position of each of `b` sequences: row s·T + i.
    All { b: usize },
    /// Sequence s's positions `positions[s]`: rows `first[s]` + i.
    Kept {
        positions: &'a [Vec<i64>],
        first: Vec<usize>,
    },
}

impl Queries<'_> {
    fn sequences(&self) -> usize {
        match self {
            Queries::All { b } => *b,
            Queries::Kept { positions, .. } => positions.len(),
        }
    }

    fn count(&self, s: usize, t: usize) -> usize {
        match self {
            Queries::All { .. } => t,
            Queries::Kept { positions, .. } => positions[s].len(),
        }
    }

    /// Position of sequence s's i-th query.
    fn position(&self, s: usize, i: usize) -> usize {
        match self {
            Queries::All { .. } => i,
            Queries::Kept { positions, .. } => positions[s][i] as usize,
        }
    }

    /// Row of sequence s's i-th query in Q and in the output.
    fn row(&self, s: usize, i: usize, t: usize) -> usize {
        match self {
            Queries::All { .. } => s * t + i,
            Queries::Kept { first, .. } => first[s] + i,
        }
    }
}

/// The attention of `queries` (rows of `q`) over the keys and values of their sequences (rows
/// s·T + j of `k` and `v`), one task per (sequence, head, block of queries) over rayon's threads
/// → the output rows [queries, d].
fn run(
    q: View,
    k: View,
    v: View,
    queries: &Queries,
    t: usize,
    d: usize,
    n_heads: usize,
) -> Vec<f32> {
    let hd = d / n_heads;
    let b = queries.sequences();
    let rows: usize = (0..b).map(|s| queries.count(s, t)).sum();
    for (view, n) in [(q, rows), (k, b * t), (v, b * t)] {
        assert!(
            n == 0 || ((n - 1) * view.stride + view.col + d <= view.data.len()),
            "attention operand smaller than its rows"
        );
    }
    let mut out = vec![0f32; rows * d];
    let tasks: Vec<(usize, usize, usize)> = (0..b)
        .flat_map(|s| (0..queries.count(s, t)).step_by(BLOCK).map(move |a| (s, a)))
        .flat_map(|(s, a)| (0..n_heads).map(move |h| (s, h, a)))
        .collect();
    let scale = 1.0 / (hd as f32).sqrt();
    let out_at = SharedOut(out.as_mut_ptr());
    tasks.into_par_iter().for_each_init(
        || (vec![0f32; BLOCK * hd], vec![0f32; BLOCK * t]),
        |(q_block, scores), (s, h, a)| {
            let n = BLOCK.min(queries.count(s, t) - a);
            let keys = queries.position(s, a + n - 1) + 1; // the block's last query sees 0..keys
            let first_row = queries.row(s, a, t);
            // The block's queries, head h, scaled by 1/√d_h: [n, hd].
            for (r, dst) in q_block.chunks_exact_mut(hd).take(n).enumerate() {
                let at = queries.row(s, a + r, t) * q.stride + q.col + h * hd;
                dst.iter_mut()
                    .zip(&q.data[at..at + hd])
                    .for_each(|(x, &y)| *x = y * scale);
            }
            let scores = &mut scores[..n * keys];
            let (k_at, v_at) = (
                s * t * k.stride + k.col + h * hd,
                s * t * v.stride + v.col + h * hd,
            );
            // SAFETY: `run` checked that every row of k and v (and of q, copied above) lies in
            // its buffer, each row with d ≥ (h + 1)·hd columns from `col`; `scores` holds n ×
            // keys; and the output rows first_row..first_row + n, columns h·hd..(h+1)·hd,
            // belong to this task alone (queries of a sequence have consecutive rows).
            unsafe {
                // scores = Q_block · Kᵀ: [n, hd] · [hd, keys] (Kᵀ: K's rows read as columns).
                let k_t = (k.data.as_ptr().add(k_at), 1, k.stride);
                product(
                    n,
                    keys,
                    hd,
                    (scores.as_mut_ptr(), keys),
                    (q_block.as_ptr(), hd, 1),
                    k_t,
                );
            }
            for (r, row) in scores.chunks_exact_mut(keys).enumerate() {
                softmax_causal_widest(row, queries.position(s, a + r) + 1);
            }
            unsafe {
                // Output rows = P · V: [n, keys] · [keys, hd].
                let y = (out_at.at(first_row * d + h * hd), d);
                let v_rows = (v.data.as_ptr().add(v_at), v.stride, 1);
                product(n, hd, keys, y, (scores.as_ptr(), keys, 1), v_rows);
            }
        },
    );
    out
}

/// dst [m, n] (pointer, row stride; columns adjacent) = lhs [m, k] · rhs [k, n], the operands
/// given as (pointer, row stride, column stride), on the calling thread.
///
/// # Safety
/// Every element the strides address lies in its operand's allocation, and nothing else
/// touches dst's elements meanwhile.
unsafe fn product(
    m: usize,
    n: usize,
    k: usize,
    (dst, dst_rs): (*mut f32, usize),
    (lhs, lhs_rs, lhs_cs): (*const f32, usize, usize),
    (rhs, rhs_rs, rhs_cs): (*const f32, usize, usize),
) {
    let i = |x: usize| x as isize;
    // SAFETY: the caller's guarantee; gemm writes dst = 1 · lhs · rhs without reading it.
    unsafe {
        gemm(
            m,
            n,
            k,
            dst,
            1,
            i(dst_rs),
            false,
            lhs,
            i(lhs_cs),
            i(lhs_rs),
            rhs,
            i(rhs_cs),
            i(rhs_rs),
            0.0,
            1.0,
            false,
            false,
            false,
            Parallelism::None,
        )
    }
}

/// The output buffer, written by the tasks in disjoint blocks.
struct SharedOut(*mut f32);
// SAFETY: the tasks write disjoint (rows, head) blocks of the buffer, which outlives them.
unsafe impl Send for SharedOut {}
unsafe impl Sync for SharedOut {}

impl SharedOut {
    /// The pointer `offset` elements in (a method, so that closures capture the whole struct).
    fn at(&self, offset: usize) -> *mut f32 {
        self.0.wrapping_add(offset)
    }
}

// [`softmax_causal`] compiled for the widest vector unit the CPU has (the same bits on every
// path: the lanes are fixed and nothing contracts to FMA).
crate::flex_kernel::widest!(fn softmax_causal_widest(row: &mut [f32], seen: usize) => softmax_causal);

/// The softmax of a row of scores whose first `seen` keys are visible; the rest become 0.
#[inline(always)]
fn softmax_causal(row: &mut [f32], seen: usize) {
    let (visible, future) = row.split_at_mut(seen);
    future.fill(0.0);
    // The max is subtracted first, as Burn's softmax does.
    let max = lanes(visible, f32::NEG_INFINITY, f32::max);
    visible.iter_mut().for_each(|x| *x = exp(*x - max));
    let inv = 1.0 / lanes(visible, 0.0, |a, b| a + b);
    visible.iter_mut().for_each(|x| *x *= inv);
}

/// A reduction by `f` over `xs` in LANES independent lanes, so that it vectorises (a float fold
/// in order does not).
#[inline(always)]
fn lanes(xs: &[f32], init: f32, f: impl Fn(f32, f32) -> f32) -> f32 {
    let mut acc = [init; LANES];
    let chunks = xs.chunks_exact(LANES);
    let tail = chunks.remainder();
    for c in chunks {
        for (a, &x) in acc.iter_mut().zip(c) {
            *a = f(*a, x);
        }
    }
    tail.iter().chain(&acc).fold(init, |a, &x| f(a, x))
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::tensor::module::attention;
    use burn::tensor::ops::AttentionModuleOptions;
    use burn::tensor::{Device, Distribution};

    /// Burn's causal attention of the same packed projection, through its own ops.
    fn reference(qkv: Tensor<3>, n_heads: usize) -> Tensor<3> {
        let [b, t, three_d] = qkv.dims();
        let d = three_d / 3;
        let heads = |at: usize| {
            qkv.clone()
                .narrow(2, at, d)
                .reshape([b, t, n_heads, d / n_heads])
                .swap_dims(1, 2)
        };
        let options = AttentionModuleOptions {
            is_causal: true,
            ..Default::default()
        };
        attention(heads(0), heads(d), heads(2 * d), None, None, options)
            .swap_dims(1, 2)
            .reshape([b, t, d])
    }

    fn max_abs_diff<const D: usize>(a: Tensor<D>, b: Tensor<D>) -> f32 {
        (a - b).abs().max().into_scalar::<f32>()
    }

    /// f32 agreement within `rel` of the output's scale (at least 1). The two sum the products
    /// in different orders; with random inputs whose outputs reach ~8 an absolute 1e-5 failed
    /// one run in many (1.1e-5), hence a bound relative to the scale.
    fn assert_close<const D: usize>(ours: Tensor<D>, want: Tensor<D>, rel: f32, what: &str) {
        let scale = want.clone().abs().max().into_scalar::<f32>().max(1.0);
        let diff = max_abs_diff(ours, want);
        assert!(
            diff <= rel * scale,
            "{what}: max |Δ| = {diff} at scale {scale}"
        );
    }

    #[test]
    fn equals_burns_attention_on_every_shape() {
        let device = Device::flex();
        // (batch, tokens, heads, head width): tokens off and on the row block and lane sizes.
        for (b, t, h, hd) in [
            (1, 1, 1, 4),
            (3, 17, 2, 8),
            (2, 64, 4, 32),
            (1, 100, 8, 16),
            (2, 33, 3, 5),
        ] {
            let qkv =
                Tensor::<3>::random([b, t, 3 * h * hd], Distribution::Normal(0.0, 2.0), &device);
            assert!(applies(&qkv), "the fused path is not taken on flex");
            let what = format!("b={b} t={t} h={h} hd={hd}");
            assert_close(
                causal_attention(qkv.clone(), h),
                reference(qkv, h),
                1e-5,
                &what,
            );
        }
    }

    #[test]
    fn kept_queries_equal_the_same_rows_of_full_attention() {
        let device = Device::flex();
        let (b, t, h, hd) = (3, 70, 4, 8);
        let d = h * hd;
        let qkv = Tensor::<3>::random([b, t, 3 * d], Distribution::Normal(0.0, 2.0), &device);
        // Sequence 0 keeps every third token, sequence 1 none, sequence 2 all but the first.
        let positions: Vec<Vec<i64>> = vec![
            (0..t as i64).step_by(3).collect(),
            vec![],
            (1..t as i64).collect(),
        ];
        let flat: Vec<i64> = positions
            .iter()
            .enumerate()
            .flat_map(|(s, p)| p.iter().map(move |&i| s as i64 * t as i64 + i))
            .collect();
        let rows = Tensor::<1, burn::tensor::Int>::from_data(
            TensorData::new(flat.clone(), [flat.len()]),
            &device,
        );
        let q = qkv
            .clone()
            .narrow(2, 0, d)
            .reshape([b * t, d])
            .select(0, rows.clone());
        let kv = qkv.clone().narrow(2, d, 2 * d);
        let ours = causal_attention_kept(q, kv, &positions, h);
        let want = reference(qkv, h).reshape([b * t, d]).select(0, rows);
        assert_close(ours, want, 1e-5, "kept queries");
    }

    #[test]
    fn large_scores_stay_finite() {
        // Scores near a thousand (exp overflows past 88): the max is subtracted before exp, as
        // Burn's softmax does. A softmax this sharp turns the scores' rounding (the products
        // sum in another order) into ~1e-5 of the output's scale, hence the looser bound.
        let device = Device::flex();
        let qkv = Tensor::<3>::random([2, 40, 3 * 16], Distribution::Normal(0.0, 20.0), &device);
        let ours = causal_attention(qkv.clone(), 2);
        assert!(
            ours.clone().is_finite().all().into_scalar::<bool>(),
            "non-finite output"
        );
        assert_close(ours, reference(qkv, 2), 1e-4, "scores near 1,000");
    }

    #[test]
    fn the_first_query_returns_its_own_value() {
        let device = Device::flex();
        let qkv = Tensor::<3>::random([1, 5, 3 * 8], Distribution::Normal(0.0, 1.0), &device);
        let out = causal_attention(qkv.clone(), 2);
        let first = out.narrow(1, 0, 1);
        let v0 = qkv.narrow(1, 0, 1).narrow(2, 16, 8);
        assert!(max_abs_diff(first, v0) < 1e-6);
    }

    #[test]
    fn the_softmax_gives_the_same_bits_at_every_vector_width() {
        let row: Vec<f32> = (0..77)
            .map(|i| ((i * 37) % 23) as f32 * 0.7 - 8.0)
            .collect();
        for seen in [1, 15, 16, 17, 60, 77] {
            let (mut wide, mut portable) = (row.clone(), row.clone());
            softmax_causal_widest(&mut wide, seen); // AVX-512 or AVX2 where the CPU has them
            softmax_causal(&mut portable, seen);
            assert!(
                wide.iter()
                    .zip(&portable)
                    .all(|(a, b)| a.to_bits() == b.to_bits())
            );
            let sum: f32 = portable.iter().sum();
            assert!((sum - 1.0).abs() < 1e-5 && portable[seen..].iter().all(|&p| p == 0.0));
        }
    }

    #[test]
    fn not_taken_under_autodiff() {
        let qkv = Tensor::<3>::zeros([1, 2, 6], &Device::flex().autodiff());
        assert!(!applies(&qkv));
    }
}
