//! Causal multi-head self-attention (no projection biases).

use burn::module::Module;
use burn::nn::Linear;
use burn::tensor::module::attention;
use burn::tensor::ops::AttentionModuleOptions;
use burn::tensor::{Device, Int, Tensor, TensorData};

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

        // softmax(QKᵀ/√d_h + causal mask)·V through Burn's attention op: a backend may fuse it
        // (flex runs it per (sequence, head) in parallel without materialising [B, H, T, T]);
        // under autodiff it is the same composition of matmul, mask and softmax.
        let y = attention(q, k, v, None, None, causal())
            .swap_dims(1, 2)
            .reshape([b, t, d]);
        self.proj.forward(y)
    }
}

impl CausalSelfAttention {
    /// Extended sparse mode (beyond the paper): the attention update of the kept query rows only.
    /// K and V are computed for every token (later tokens attend to them); Q, the score rows and
    /// the output projection only for the rows `keep` (flat indices into B·T, ascending), whose
    /// positions within each sequence are `positions[b]`. Returns [k, d] in the order of `keep`.
    pub fn forward_rows(
        &self,
        x: Tensor<3>,
        keep: Tensor<1, Int>,
        positions: &[Vec<i64>],
    ) -> Tensor<2> {
        let [b, t, d] = x.dims();
        let (nh, hd) = (self.n_heads, d / self.n_heads);
        let device = x.device();
        let w = self.qkv.weight.val(); // [d, 3d]: Q | K | V columns, no bias
        let flat = x.reshape([b * t, d]);
        let kv = flat
            .clone()
            .matmul(w.clone().narrow(1, d, 2 * d))
            .reshape([b, t, 2 * d]);
        let k = kv
            .clone()
            .narrow(2, 0, d)
            .reshape([b, t, nh, hd])
            .swap_dims(1, 2);
        let v = kv.narrow(2, d, d).reshape([b, t, nh, hd]).swap_dims(1, 2);
        let q_rows = flat.select(0, keep).matmul(w.narrow(1, 0, d)); // [k, d]
        let key_pos = Tensor::<1, Int>::arange(0..t as i64, &device).reshape([1, t]);

        let mut outs = Vec::with_capacity(b);
        let mut offset = 0;
        for (s, pos) in positions.iter().enumerate() {
            let n = pos.len();
            if n == 0 {
                continue;
            }
            let q = q_rows
                .clone()
                .narrow(0, offset, n)
                .reshape([n, nh, hd])
                .swap_dims(0, 1);
            let ks = k.clone().narrow(0, s, 1); // [1, H, T, hd]
            let vs = v.clone().narrow(0, s, 1);
            let qpos = Tensor::<1, Int>::from_data(TensorData::new(pos.clone(), [n]), &device)
                .reshape([n, 1]);
            // The kept queries sit at `pos`, so the causal mask is per row: key j > pos[i].
            let future = key_pos.clone().expand([n, t]).greater(qpos.expand([n, t]));
            let y = attention(
                q.unsqueeze::<4>(),
                ks,
                vs,
                Some(future.unsqueeze::<4>()),
                None,
                AttentionModuleOptions::default(),
            ); // [1, H, n, hd]
            outs.push(y.reshape([nh, n, hd]).swap_dims(0, 1).reshape([n, d]));
            offset += n;
        }
        self.proj.forward(Tensor::cat(outs, 0))
    }
}

/// Scale 1/√d_h (Burn's default) with the causal mask: query i sees keys j ≤ i.
fn causal() -> AttentionModuleOptions {
    AttentionModuleOptions {
        is_causal: true,
        ..Default::default()
    }
}
