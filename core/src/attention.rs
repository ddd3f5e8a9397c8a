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
    /// the output projection only for the kept rows, whose positions within sequence b are
    /// `positions[b]` (ascending). Returns [k, d], sequence by sequence, in position order.
    pub fn forward_rows(&self, x: Tensor<3>, positions: &[Vec<i64>]) -> Tensor<2> {
        let [b, t, d] = x.dims();
        let (nh, hd) = (self.n_heads, d / self.n_heads);
        let device = x.device();
        let w = self.qkv.weight.val(); // [d, 3d]: Q | K | V columns, no bias
        let flat = x.reshape([b * t, d]);
        let heads = |m: Tensor<2>, rows: usize| m.reshape([b, rows, nh, hd]).swap_dims(1, 2);
        let kv = flat.clone().matmul(w.clone().narrow(1, d, 2 * d));
        let k = heads(kv.clone().narrow(1, 0, d), t);
        let v = heads(kv.narrow(1, d, d), t);

        // One attention call for the whole batch: each sequence's kept queries padded to the
        // longest run. A padding slot reads the sequence's last token and is dropped after.
        let n_max = positions.iter().map(Vec::len).max().unwrap_or(0);
        let (mut rows, mut query_pos, mut kept) = (Vec::new(), Vec::new(), Vec::new());
        for (s, pos) in positions.iter().enumerate() {
            for i in 0..n_max {
                let p = pos.get(i).copied();
                if p.is_some() {
                    kept.push((s * n_max + i) as i64);
                }
                let p = p.unwrap_or(t as i64 - 1);
                rows.push(s as i64 * t as i64 + p);
                query_pos.push(p);
            }
        }
        let ints = |v: Vec<i64>| {
            let n = v.len();
            Tensor::<1, Int>::from_data(TensorData::new(v, [n]), &device)
        };
        let q = heads(flat.select(0, ints(rows)).matmul(w.narrow(1, 0, d)), n_max);
        // The kept queries sit at their own positions, so the causal mask is per row (given at
        // the op's documented full shape: not every backend broadcasts a mask).
        let shape = [b, nh, n_max, t];
        let key_pos = Tensor::<1, Int>::arange(0..t as i64, &device).reshape([1, 1, 1, t]);
        let future = key_pos
            .expand(shape)
            .greater(ints(query_pos).reshape([b, 1, n_max, 1]).expand(shape));
        let y = attention(
            q,
            k,
            v,
            Some(future),
            None,
            AttentionModuleOptions::default(),
        );
        let y = y
            .swap_dims(1, 2)
            .reshape([b * n_max, d])
            .select(0, ints(kept));
        self.proj.forward(y)
    }
}

/// Scale 1/√d_h (Burn's default) with the causal mask: query i sees keys j ≤ i.
fn causal() -> AttentionModuleOptions {
    AttentionModuleOptions {
        is_causal: true,
        ..Default::default()
    }
}
