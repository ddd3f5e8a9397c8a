//! GPU kernels for sparse inference (§3.6) on cubecl devices (wgpu, CUDA): the kept tokens'
//! FFN, and in the extended mode their attention query rows, with no host read. Burn's ops need
//! the number of kept rows on the host (`argwhere`, then `select` and a matmul of k rows): a sync
//! per routed block, which made sparse execution 2.4× slower than dense on a GPU. Here the keep
//! mask is compacted on the device (`compact`) and the kernels are dispatched for every row, the
//! rows past the device-side count exiting at once (a bounded grid instead of an indirect
//! dispatch): `rows` (matmuls over the compacted rows), `ffn`, `attention`.
//!
//! CubeCL rather than hand-written WGSL: one source serves wgpu (compiled to WGSL, which wgpu
//! validates with naga before it runs), CUDA and the cubecl CPU runtime, and reaches Burn's
//! device-agnostic `Tensor`s through backend extensions (`Dispatch`). Other devices (flex,
//! autodiff) keep Burn's ops in tsa-core.

mod attention;
mod compact;
mod ffn;
mod rows;

use burn::backend::tensor::FloatTensor;
use burn::backend::{Backend, Dispatch, DispatchDevice, backend_extension};
use burn::tensor::{Device, Tensor};
use burn_cubecl::CubeBackend;

pub use attention::MAX_WIDTH;

#[backend_extension(Cube, Fusion)]
pub trait SparseOps: Backend {
    /// `h + scale ⊙ ffn(x)` over rows ([n, d] each, `scale` [n]), where only the rows with
    /// `scale > 0` run the FFN (`w1` [d, d_ff], `b1` [d_ff], `w2` [d_ff, d], `b2` [d]).
    #[fusion(dtype = h, shape = h)]
    fn sparse_ffn_add(
        h: FloatTensor<Self>,
        x: FloatTensor<Self>,
        scale: FloatTensor<Self>,
        w1: FloatTensor<Self>,
        b1: FloatTensor<Self>,
        w2: FloatTensor<Self>,
        b2: FloatTensor<Self>,
    ) -> FloatTensor<Self>;

    /// `h + scale ⊙ attention(x)` over rows ([n, d], n = B·T, `scale` [n]), where only the rows
    /// with `scale > 0` run their query (Q = x·`wq`, causal attention over `k`, `v` [B, T, d]
    /// in `n_heads` heads, output projection `wo`; no biases).
    #[fusion(dtype = h, shape = h)]
    #[allow(clippy::too_many_arguments)]
    fn sparse_attention_add(
        h: FloatTensor<Self>,
        x: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        scale: FloatTensor<Self>,
        wq: FloatTensor<Self>,
        wo: FloatTensor<Self>,
        n_heads: usize,
    ) -> FloatTensor<Self>;
}

impl SparseOps for CubeBackend {
    fn sparse_ffn_add(
        h: FloatTensor<Self>,
        x: FloatTensor<Self>,
        scale: FloatTensor<Self>,
        w1: FloatTensor<Self>,
        b1: FloatTensor<Self>,
        w2: FloatTensor<Self>,
        b2: FloatTensor<Self>,
    ) -> FloatTensor<Self> {
        ffn::sparse_ffn_add(h, x, scale, [w1, b1, w2, b2])
    }

    fn sparse_attention_add(
        h: FloatTensor<Self>,
        x: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        scale: FloatTensor<Self>,
        wq: FloatTensor<Self>,
        wo: FloatTensor<Self>,
        n_heads: usize,
    ) -> FloatTensor<Self> {
        attention::sparse_attention_add(h, x, k, v, scale, wq, wo, n_heads)
    }
}

/// Whether the kernels run on `device`: a cubecl device without autodiff (inference).
pub fn available(device: &Device) -> bool {
    !device.is_autodiff() && matches!(device.as_dispatch(), DispatchDevice::Cube(_))
}

/// The FFN's weights: `w1` [d, d_ff], `b1` [d_ff], `w2` [d_ff, d], `b2` [d] (x·w + b, GELU
/// between).
pub struct FfnWeights {
    pub w1: Tensor<2>,
    pub b1: Tensor<1>,
    pub w2: Tensor<2>,
    pub b2: Tensor<1>,
}

/// `h + scale ⊙ ffn(x)` for `h`, `x` [n, d] and `scale` [n], the FFN run only for the rows with
/// `scale > 0`, on the device. Only for devices where [`available`] holds.
pub fn sparse_ffn_add(h: Tensor<2>, x: Tensor<2>, scale: Tensor<1>, ffn: FfnWeights) -> Tensor<2> {
    let out = <Dispatch as SparseOps>::sparse_ffn_add(
        h.into_dispatch(),
        x.into_dispatch(),
        scale.into_dispatch(),
        ffn.w1.into_dispatch(),
        ffn.b1.into_dispatch(),
        ffn.w2.into_dispatch(),
        ffn.b2.into_dispatch(),
    );
    Tensor::from_dispatch(out)
}

/// The attention's inputs for [`sparse_attention_add`]: `x` [n, d] (layer-normed), every
/// token's keys and values `k`, `v` [B, T, d], the projections `wq`, `wo` [d, d].
pub struct AttentionRows {
    pub x: Tensor<2>,
    pub k: Tensor<3>,
    pub v: Tensor<3>,
    pub wq: Tensor<2>,
    pub wo: Tensor<2>,
    pub n_heads: usize,
}

/// `h + scale ⊙ attention(x)` for `h` [n, d] and `scale` [n], only the rows with `scale > 0`
/// running their query, on the device. Only where [`available`] holds and d ≤ [`MAX_WIDTH`].
pub fn sparse_attention_add(h: Tensor<2>, scale: Tensor<1>, a: AttentionRows) -> Tensor<2> {
    let out = <Dispatch as SparseOps>::sparse_attention_add(
        h.into_dispatch(),
        a.x.into_dispatch(),
        a.k.into_dispatch(),
        a.v.into_dispatch(),
        scale.into_dispatch(),
        a.wq.into_dispatch(),
        a.wo.into_dispatch(),
        a.n_heads,
    );
    Tensor::from_dispatch(out)
}
