//! The routers and the gates they produce for each variant.

use burn::module::Module;
use burn::nn::Linear;
use burn::tensor::activation::{relu, sigmoid};
use burn::tensor::{Bool, Device, Tensor};

use crate::init;

/// Bias of the router's last layer at initialisation (§2.2): σ(−1) ≈ 0.27, so training starts
/// with most of every update let through instead of collapsing to "halt everything".
pub const ROUTER_FINAL_BIAS: f64 = -1.0;

/// Halting threshold of sparse inference (§3.6): tokens with p_l > 0.5 skip the next block.
pub const HALT_THRESHOLD: f64 = 0.5;

/// Router (§2.2): r_l(h) = σ(W₂ ReLU(W₁h + b₁) + b₂) ∈ (0, 1)^{B×T}, the halting probability.
#[derive(Module, Debug)]
pub struct Router {
    pub fc: Linear,
    pub out: Linear,
}

impl Router {
    pub fn init(d_model: usize, hidden: usize, device: &Device) -> Self {
        Self {
            fc: init::linear(d_model, hidden, init::STD, Some(0.0), device),
            out: init::linear(hidden, 1, init::STD, Some(ROUTER_FINAL_BIAS), device),
        }
    }

    /// `h`: [B, T, d] → p: [B, T].
    pub fn forward(&self, h: Tensor<3>) -> Tensor<2> {
        sigmoid(self.out.forward(relu(self.fc.forward(h)))).squeeze_dim::<2>(2)
    }
}

/// How kept tokens are scaled in sparse inference. The model was trained with `1 − p`, so the
/// default keeps that scale; `One` treats the gate as fully binary (measured in docs/RESULTS.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub enum KeepScale {
    #[default]
    OneMinusP,
    One,
}

impl KeepScale {
    /// The update scale of each token from its 0/1 `keep` mask and its soft gate `1 − p`.
    pub fn apply(self, keep: Tensor<2>, one_minus_p: Tensor<2>) -> Tensor<2> {
        match self {
            KeepScale::OneMinusP => keep * one_minus_p,
            KeepScale::One => keep,
        }
    }
}

/// Tokens that run the next block: p ≤ 0.5.
pub fn kept(p: Tensor<2>) -> Tensor<2, Bool> {
    p.lower_equal_elem(HALT_THRESHOLD)
}

/// Mixture-of-Depths expert-choice selection: 1 for the `k` tokens of each sequence with the
/// largest weight `w` [B, T], else 0. Ties go to the earlier position.
///
/// Built from elementwise comparisons (rank_i = #{j : w_j > w_i} + #{j < i : w_j = w_i}) rather
/// than `topk`, which reads back to the host inside Burn on WebGPU. The selection looks at the
/// whole sequence, so it is not causal: see `Execution::Sparse` for the causal inference rule.
pub fn top_k_mask(w: Tensor<2>, k: usize) -> Tensor<2> {
    let [b, t] = w.dims();
    let device = w.device();
    let wi = w.clone().reshape([b, t, 1]).expand([b, t, t]);
    let wj = w.reshape([b, 1, t]).expand([b, t, t]);
    // j < i, in (query i, key j) coordinates: Burn's `triu_mask` marks what `triu` would zero.
    let before = Tensor::<2, Bool>::triu_mask([t, t], 0, &device);
    let greater = wj.clone().greater(wi.clone()).float();
    let tie_before = wj
        .equal(wi)
        .bool_and(before.unsqueeze::<3>().expand([b, t, t]))
        .float();
    let rank = (greater + tie_before).sum_dim(2).squeeze_dim::<2>(2);
    rank.lower_elem(k as f64).float()
}

/// Number of tokens MoD keeps in a sequence of length `t` at capacity `c`.
pub fn capacity_k(capacity: f64, t: usize) -> usize {
    ((capacity * t as f64).ceil() as usize).clamp(1, t)
}
