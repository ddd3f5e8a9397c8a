//! GPU kernels for sparse inference (§3.6) on cubecl devices (wgpu, CUDA): the kept tokens'
//! FFN with no host read. Burn's ops need the number of kept rows on the host (`argwhere`, then
//! `select` and a matmul of k rows): a sync per routed block, which made sparse execution 2.4×
//! slower than dense on a GPU. Here the keep mask is compacted on the device and the FFN kernels
//! are dispatched for every row, the rows past the device-side count exiting at once (a bounded
//! grid instead of an indirect dispatch).
//!
//! CubeCL rather than hand-written WGSL: one source serves wgpu (compiled to WGSL, which wgpu
//! validates with naga before it runs), CUDA and the cubecl CPU runtime, and reaches Burn's
//! device-agnostic `Tensor`s through backend extensions (`Dispatch`). Other devices (flex,
//! autodiff) keep Burn's ops in tsa-core.

mod ffn;

use burn::backend::tensor::FloatTensor;
use burn::backend::{Backend, Dispatch, DispatchDevice, backend_extension};
use burn::tensor::{Device, Tensor};

#[backend_extension(Cube, Fusion)]
pub trait SparseFfnOps: Backend {
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
    let out = <Dispatch as SparseFfnOps>::sparse_ffn_add(
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
