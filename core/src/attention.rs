//! Causal multi-head self-attention (no projection biases).

use burn::module::Module;
use burn::nn::Linear;
use burn::tensor::activation::softmax;
use burn::tensor::{Bool, Device, Tensor};

use crate::init;

#[derive(Module, Debug)]
pub struct CausalSelfAttention {
    /// Fused Q, K, V projection, d → 3d.
    pub qkv: Linear,
    /// Output projection d → d: a residual projection, so it gets the scaled init.
    pub proj: Linear,
    pub n_heads: usize,
}

impl CausalSelfAttention {
    pub fn init(d_model: usize, n_heads: usize, n_layers: usize, device: &Device) -> Self {
        Self {
            qkv: init::linear(d_model, 3 * d_model, init::STD, None, device),
            proj: init::linear(d_model, d_model, init::residual_std(n_layers), None, device),
            n_heads,
        }
    }

    /// `x`: [B, T, d] (already layer-normed) → the attention update Δattn: [B, T, d].
    pub fn forward(&self, x: Tensor<3>) -> Tensor<3> {
        let [b, t, d] = x.dims();
        let hd = d / self.n_heads;
        let heads = |m: Tensor<3>| m.reshape([b, t, self.n_heads, hd]).swap_dims(1, 2);
        let qkv = self.qkv.forward(x);
        let q = heads(qkv.clone().narrow(2, 0, d));
        let k = heads(qkv.clone().narrow(2, d, d));
        let v = heads(qkv.narrow(2, 2 * d, d));

        let scores = q.matmul(k.swap_dims(2, 3)).div_scalar((hd as f64).sqrt());
        let future = causal_mask(t, &scores.device()).unsqueeze::<4>().expand([b, self.n_heads, t, t]);
        let weights = softmax(scores.mask_fill(future, -1.0e9), 3);
        let y = weights.matmul(v).swap_dims(1, 2).reshape([b, t, d]);
        self.proj.forward(y)
    }
}

/// True where key position j lies in the future of query position i (j > i).
pub fn causal_mask(t: usize, device: &Device) -> Tensor<2, Bool> {
    // Burn's `tril_mask` marks what `tril` would zero: strictly above the diagonal.
    Tensor::<2, Bool>::tril_mask([t, t], 0, device)
}
