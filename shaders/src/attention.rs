//! The extended sparse mode's attention (beyond the paper): only the kept tokens' query rows run
//! — their Q projection, their score rows against every earlier key, and their output
//! projection — while K and V come from every token (later tokens attend to them).

use burn::backend::cubecl::dtype_to_storage_type;
use burn::tensor::Shape;
use burn_cubecl::cubecl;
use burn_cubecl::ops::numeric::empty_device_contiguous_dtype;
use burn_cubecl::tensor::CubeTensor;
use cubecl::prelude::*;
use cubecl::{CubeCount, CubeDim};

use crate::compact::compact;
use crate::rows::{gathered_linear, scatter_add};

/// Widest model the attention kernel serves: one invocation per channel of a row, and WebGPU
/// allows 256 per workgroup.
pub const MAX_WIDTH: usize = 256;

/// Cubes per grid row (a grid side may not exceed 65,535 cubes).
const GRID_X: usize = 1024;

/// One cube per kept row r (compacted; cubes past the count exit), one invocation per (head,
/// channel): the causal attention of query `q[r]` (already projected) over the keys and values
/// `k`, `v` [B, T, d] of its own sequence up to its own position, with an online softmax over
/// key tiles as wide as a head. Each invocation scores one key of its head per tile, so a score
/// is computed once; its channel then accumulates the tile's values.
#[cube(launch)]
fn attention_rows_kernel<F: Float>(
    q: &Tensor<F>,
    k: &Tensor<F>,
    v: &Tensor<F>,
    rows: &Tensor<u32>,
    count: &Tensor<u32>,
    y: &mut Tensor<F>,
    #[comptime] d: usize,
    #[comptime] hd: usize,
    #[define(F)] _dtype: ElemType,
) {
    let r = CUBE_POS_Y as usize * CUBE_COUNT_X as usize + CUBE_POS_X as usize;
    if r >= count[0] as usize {
        terminate!(); // the whole cube
    }
    let head = UNIT_POS_Y as usize;
    let c = UNIT_POS_X as usize;
    let ch = head * hd + c;
    let t = k.shape(1);
    let row = rows[r] as usize;
    let (seq, pos) = (row / t, row % t);
    let mut q_sh = Shared::<[F]>::new_slice(d);
    let mut score = Shared::<[F]>::new_slice(d);
    q_sh[ch] = q[r * q.stride(0) + ch * q.stride(1)] / F::sqrt(F::new(hd as f32));
    sync_cube();
    let lowest = F::new(-1.0e30);
    let (mut m, mut l, mut acc) = (lowest, F::new(0.0), F::new(0.0));
    let mut j0 = 0usize;
    while j0 <= pos {
        // Score of key j0 + c for this head (a later key than the query's scores nothing).
        let j = j0 + c;
        let mut s = lowest;
        if j <= pos {
            let base = seq * k.stride(0) + j * k.stride(1);
            let mut dot = F::new(0.0);
            for i in 0..hd {
                dot += q_sh[head * hd + i] * k[base + (head * hd + i) * k.stride(2)];
            }
            s = dot;
        }
        score[ch] = s;
        sync_cube();
        let mut tile_max = m;
        for jj in 0..hd {
            tile_max = F::max(tile_max, score[head * hd + jj]);
        }
        let rescale = F::exp(m - tile_max);
        l *= rescale;
        acc *= rescale;
        for jj in 0..hd {
            if j0 + jj <= pos {
                let e = F::exp(score[head * hd + jj] - tile_max);
                l += e;
                acc += e * v[seq * v.stride(0) + (j0 + jj) * v.stride(1) + ch * v.stride(2)];
            }
        }
        m = tile_max;
        sync_cube();
        j0 += hd;
    }
    y[r * d + ch] = acc / l;
}

/// `h + scale ⊙ attention(x)` over rows [n, d] (n = B·T) with only the rows where `scale > 0`
/// running their query: Q = x·`wq` for them, their causal attention over `k`, `v` [B, T, d],
/// and the output projection `wo` (no biases, as the model's).
#[allow(clippy::too_many_arguments)] // one handle per tensor, as `SparseOps` passes them
pub fn sparse_attention_add(
    h: CubeTensor,
    x: CubeTensor,
    k: CubeTensor,
    v: CubeTensor,
    scale: CubeTensor,
    wq: CubeTensor,
    wo: CubeTensor,
    n_heads: usize,
) -> CubeTensor {
    let (client, device, dtype) = (h.client.clone(), h.device.clone(), h.dtype);
    let [n, d] = h.meta.shape().dims::<2>();
    assert!(
        d <= MAX_WIDTH && n_heads > 0 && d % n_heads == 0,
        "attention rows: width {d} over {n_heads} heads (at most {MAX_WIDTH} wide)"
    );
    let kept = compact(scale.clone());
    let q = gathered_linear(x, &kept, wq, None);
    let y = empty_device_contiguous_dtype(client.clone(), device, Shape::from(vec![n, d]), dtype);
    let hd = d / n_heads;
    attention_rows_kernel::launch(
        &client,
        CubeCount::Static(n.min(GRID_X) as u32, n.div_ceil(GRID_X) as u32, 1),
        CubeDim::new_2d(hd as u32, n_heads as u32),
        q.into_tensor_arg(),
        k.into_tensor_arg(),
        v.into_tensor_arg(),
        kept.rows.clone().into_tensor_arg(),
        kept.count.clone().into_tensor_arg(),
        y.clone().into_tensor_arg(),
        d,
        hd,
        dtype_to_storage_type(dtype),
    );
    scatter_add(h, scale, kept, y, wo, None)
}
