//! Sparse inference (§3.6): only the kept tokens run the FFN, gathered into a dense [k, d] block
//! and scattered back; the halted rows get a zero update. The extended mode also skips halted
//! tokens' query rows. Everything here reads the keep mask back to the host (`argwhere`), so it
//! is a path for native inference and for CPU training with `TrainConfig::skip_halted` (flex,
//! natively or in wasm); WebGPU in the browser trains and evaluates with soft or masked gates.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use burn::tensor::ops::AttentionModuleOptions;
use burn::tensor::{Bool, IndexingUpdateOp, Int, Tensor, TensorData};

use crate::attention::{CausalSelfAttention, QUERY_RANGES, position_ranges};
use crate::ffn::Ffn;
use crate::gate::Gate;
#[cfg(not(target_family = "wasm"))]
use tsa_shaders::AttentionRows;

/// The hard gate for the tokens `keep` [B, T], their updates scaled by `scale` [B, T];
/// `skip_queries` for the extended mode.
pub fn hard_gate(keep: Tensor<2, Bool>, scale: Tensor<2>, skip_queries: bool) -> Gate {
    let [b, t] = keep.dims();
    let keep = keep_indices(keep);
    let queries = skip_queries.then(|| positions_per_sequence(&keep, b, t));
    Gate::Hard {
        keep,
        scale: scale.unsqueeze_dim(2),
        queries,
    }
}

/// Host reads made by sparse execution so far (`keep_indices` and `positions_per_sequence`, the
/// only two): the on-device path is checked to add none.
static HOST_READS: AtomicUsize = AtomicUsize::new(0);

pub fn host_reads() -> usize {
    HOST_READS.load(Ordering::Relaxed)
}

/// Flat indices (into B·T) of the `true` entries of `keep` [B, T] (a host read).
pub fn keep_indices(keep: Tensor<2, Bool>) -> Tensor<1, Int> {
    HOST_READS.fetch_add(1, Ordering::Relaxed);
    let n = keep.shape().num_elements();
    let idx = keep.reshape([n]).argwhere();
    let k = idx.dims()[0];
    idx.reshape([k])
}

/// Kept positions of each of `b` sequences of length `t`, from ascending flat indices (a host
/// read).
pub fn positions_per_sequence(keep: &Tensor<1, Int>, b: usize, t: usize) -> Vec<Vec<i64>> {
    HOST_READS.fetch_add(1, Ordering::Relaxed);
    let flat: Vec<i64> = keep
        .clone()
        .into_data()
        .convert::<i64>()
        .try_into_vec::<i64>()
        .expect("argwhere yields integer indices");
    let mut out = vec![Vec::new(); b];
    for i in flat {
        out[i as usize / t].push(i % t as i64);
    }
    out
}

/// `h` [B, T, d] plus `rows` [k, d], the updates of the flat rows `keep`, each scaled by its
/// `scale` [B, T, 1]; the other rows unchanged. Added straight into `h` (no zero [B, T, d]
/// update tensor and no full-size add: both cost a pass over memory per block).
pub fn add_rows(
    h: Tensor<3>,
    rows: Tensor<2>,
    keep: Tensor<1, Int>,
    scale: Tensor<3>,
) -> Tensor<3> {
    let [b, t, d] = h.dims();
    if keep.dims()[0] == 0 {
        return h;
    }
    let rows = rows * scale.reshape([b * t, 1]).select(0, keep.clone());
    h.reshape([b * t, d])
        .select_assign(0, keep, rows, IndexingUpdateOp::Add)
        .reshape([b, t, d])
}

/// `h` plus the FFN update of the rows `keep` of `x` [B, T, d], each scaled by its `scale`
/// [B, T, 1]. Equal to `h + scale ⊙ ffn(x)` when `scale` is zero off `keep`.
pub fn add_ffn_rows(
    h: Tensor<3>,
    ffn: &Ffn,
    x: Tensor<3>,
    keep: Tensor<1, Int>,
    scale: Tensor<3>,
) -> Tensor<3> {
    let [b, t, d] = x.dims();
    if keep.dims()[0] == 0 {
        return h;
    }
    let rows = ffn.forward(x.reshape([b * t, d]).select(0, keep.clone()));
    add_rows(h, rows, keep, scale)
}

/// Whether `Execution::Sparse` may use the device kernels where they exist (the default); off,
/// it gathers through the host everywhere, as before them (for benchmarks to compare the two).
static DEVICE_KERNELS: AtomicBool = AtomicBool::new(true);

pub fn use_device_kernels(on: bool) {
    DEVICE_KERNELS.store(on, Ordering::Relaxed);
}

/// Whether sparse execution on `device` runs on the device itself (the cubecl kernels) instead
/// of through a host read of the keep mask.
pub fn on_device(device: &burn::tensor::Device) -> bool {
    #[cfg(not(target_family = "wasm"))]
    return DEVICE_KERNELS.load(Ordering::Relaxed) && tsa_shaders::available(device);
    #[cfg(target_family = "wasm")]
    return {
        let _ = device;
        false
    };
}

/// `h + scale ⊙ ffn(x)` for [B, T, ·] tensors, the FFN run only where `scale > 0`: on a cubecl
/// device by the kernels (compaction and the FFN on the device, no host read), elsewhere by
/// masking (every row computes).
pub fn add_ffn_kept(h: Tensor<3>, ffn: &Ffn, x: Tensor<3>, scale: Tensor<3>) -> Tensor<3> {
    #[cfg(not(target_family = "wasm"))]
    if tsa_shaders::available(&h.device()) {
        let [b, t, d] = h.dims();
        let bias = |linear: &burn::nn::Linear, width: usize| match &linear.bias {
            Some(bias) => bias.val(),
            None => Tensor::zeros([width], &h.device()),
        };
        let weights = tsa_shaders::FfnWeights {
            w1: ffn.fc.weight.val(),
            b1: bias(&ffn.fc, ffn.fc.weight.dims()[1]),
            w2: ffn.proj.weight.val(),
            b2: bias(&ffn.proj, d),
        };
        let (n, rows) = (b * t, |m: Tensor<3>| m.reshape([b * t, d]));
        let out = tsa_shaders::sparse_ffn_add(rows(h), rows(x), scale.reshape([n]), weights);
        return out.reshape([b, t, d]);
    }
    h + scale * ffn.forward(x)
}

/// Whether a model of width `d` runs the extended mode's query rows on the device (up to the
/// kernels' widest; none in the browser); wider ones run every query and mask, as
/// `Execution::Sparse` does.
#[cfg(not(target_family = "wasm"))]
pub fn queries_on_device(d: usize) -> bool {
    d <= tsa_shaders::MAX_WIDTH
}
#[cfg(target_family = "wasm")]
pub fn queries_on_device(_d: usize) -> bool {
    false
}

/// `h + scale ⊙ attn(x)` for [B, T, ·] tensors, only the tokens with `scale > 0` running their
/// query rows (Q, scores, output projection; every token's K and V are computed, later tokens
/// attend to them): on a cubecl device by the kernels, with no host read; elsewhere by masking
/// (every query runs).
pub fn add_attention_kept(
    h: Tensor<3>,
    attn: &CausalSelfAttention,
    x: Tensor<3>,
    scale: Tensor<3>,
) -> Tensor<3> {
    let [b, t, d] = x.dims();
    #[cfg(not(target_family = "wasm"))]
    if tsa_shaders::available(&h.device()) && queries_on_device(d) && attn.proj.bias.is_none() {
        let w = attn.qkv.weight.val(); // [d, 3d]: Q | K | V columns, no bias
        let kv = x
            .clone()
            .matmul(w.clone().narrow(1, d, 2 * d).unsqueeze::<3>());
        let rows = AttentionRows {
            x: x.reshape([b * t, d]),
            k: kv.clone().narrow(2, 0, d),
            v: kv.narrow(2, d, d),
            wq: w.narrow(1, 0, d),
            wo: attn.proj.weight.val(),
            n_heads: attn.n_heads,
        };
        let out =
            tsa_shaders::sparse_attention_add(h.reshape([b * t, d]), scale.reshape([b * t]), rows);
        return out.reshape([b, t, d]);
    }
    let _ = (b, t, d);
    h + scale * attn.forward(x, None)
}

/// `h` plus the attention update of the kept query rows only, scaled by `scale` (extended sparse
/// mode, beyond the paper). K and V are computed for every token of `x` [B, T, d] (layer-normed;
/// later tokens attend to them); Q, the score rows and the output projection only for the kept
/// rows: `keep`, their ascending flat indices into B·T, and `positions[b]`, the same rows as
/// positions within sequence b.
pub fn add_attention_rows(
    h: Tensor<3>,
    attn: &CausalSelfAttention,
    x: Tensor<3>,
    keep: Tensor<1, Int>,
    positions: &[Vec<i64>],
    scale: Tensor<3>,
) -> Tensor<3> {
    let [b, t, d] = x.dims();
    if keep.dims()[0] == 0 {
        return h; // nothing kept: no query row runs at all
    }
    let (nh, hd) = (attn.n_heads, d / attn.n_heads);
    let device = x.device();
    let ints = |v: Vec<i64>| {
        let n = v.len();
        Tensor::<1, Int>::from_data(TensorData::new(v, [n]), &device)
    };
    let w = attn.qkv.weight.val(); // [d, 3d]: Q | K | V columns, no bias
    let flat = x.reshape([b * t, d]);
    let kv = flat.clone().matmul(w.clone().narrow(1, d, 2 * d));
    // Q for the kept rows only, in output order; sequence s's rows start at first[s].
    let q_all = flat.select(0, keep.clone()).matmul(w.narrow(1, 0, d));
    #[cfg(not(target_family = "wasm"))]
    if crate::fused_attention::applies(&kv) {
        let kv = kv.reshape([b, t, 2 * d]);
        let y = crate::fused_attention::causal_attention_kept(q_all, kv, positions, nh);
        return add_rows(h, attn.proj.forward(y), keep, scale);
    }
    let heads = |m: Tensor<2>, rows: usize| m.reshape([b, rows, nh, hd]).swap_dims(1, 2);
    let k = heads(kv.clone().narrow(1, 0, d), t);
    let v = heads(kv.narrow(1, d, d), t);
    let first: Vec<usize> = positions
        .iter()
        .scan(0, |n, pos| {
            let at = *n;
            *n += pos.len();
            Some(at)
        })
        .collect();

    // One attention call per position range, over the batch: each sequence's kept queries in
    // the range padded to the longest run (a padding slot reads Q row 0, sees every key and
    // is dropped), keys cut at the range's end, and the causal mask per row.
    let (mut outs, mut order) = (Vec::new(), Vec::new());
    for (lo, hi) in position_ranges(t, QUERY_RANGES) {
        let in_range: Vec<(usize, usize)> = positions
            .iter()
            .map(|pos| {
                let from = pos.partition_point(|&p| p < lo as i64);
                (from, pos.partition_point(|&p| p < hi as i64))
            })
            .collect();
        let n_max = in_range.iter().map(|(a, z)| z - a).max().unwrap_or(0);
        if n_max == 0 {
            continue;
        }
        let (mut rows, mut query_pos, mut kept) = (Vec::new(), Vec::new(), Vec::new());
        for (s, &(a, z)) in in_range.iter().enumerate() {
            for i in 0..n_max {
                if a + i < z {
                    let row = (first[s] + a + i) as i64;
                    kept.push((s * n_max + i) as i64);
                    order.push(row);
                    rows.push(row);
                    query_pos.push(positions[s][a + i]);
                } else {
                    rows.push(0);
                    query_pos.push(hi as i64 - 1);
                }
            }
        }
        let q = q_all
            .clone()
            .select(0, ints(rows))
            .reshape([b, n_max, nh, hd])
            .swap_dims(1, 2);
        // Compared once per sequence, then given at the op's documented full shape (not every
        // backend broadcasts a mask over heads).
        let shape = [b, 1, n_max, hi];
        let key_pos = Tensor::<1, Int>::arange(0..hi as i64, &device).reshape([1, 1, 1, hi]);
        let future = key_pos
            .expand(shape)
            .greater(ints(query_pos).reshape([b, 1, n_max, 1]).expand(shape))
            .expand([b, nh, n_max, hi]);
        let y = burn::tensor::module::attention(
            q,
            k.clone().narrow(2, 0, hi),
            v.clone().narrow(2, 0, hi),
            Some(future),
            None,
            AttentionModuleOptions::default(),
        );
        outs.push(
            y.swap_dims(1, 2)
                .reshape([b * n_max, d])
                .select(0, ints(kept)),
        );
    }
    // Back from range order to sequence order: row j of `y` is output row order[j].
    let mut inverse = vec![0i64; order.len()];
    for (j, &o) in order.iter().enumerate() {
        inverse[o as usize] = j as i64;
    }
    let y = Tensor::cat(outs, 0).select(0, ints(inverse));
    add_rows(h, attn.proj.forward(y), keep, scale)
}
