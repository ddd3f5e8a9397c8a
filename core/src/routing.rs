//! The routers and the gates they produce for each variant.

use burn::module::Module;
use burn::nn::Linear;
use burn::tensor::activation::{relu, sigmoid};
use burn::tensor::{Bool, Device, Distribution, Tensor};

use crate::config::{TsaConfig, TsaGate};
use crate::init::{self, Bias};

/// Bias of the router's last layer at initialisation (§2.2): σ(−1) ≈ 0.27, so training starts
/// with most of every update let through instead of collapsing to "halt everything".
/// (`TsaConfig::router_bias`, whose default this is, lets the initialisation test vary it.)
pub const ROUTER_FINAL_BIAS: f64 = -1.0;

/// Gumbel gate: the temperature falls geometrically from 1 to this over training...
pub const GUMBEL_TAU_END: f64 = 0.05;
/// ...and from this share of training on, its forward pass is the hard sample (straight-through).
pub const GUMBEL_HARD_FROM: f64 = 0.8;

/// Halting threshold of sparse inference (§3.6): tokens with p_l > 0.5 skip the next block.
pub const HALT_THRESHOLD: f64 = 0.5;

/// Router (§2.2): r_l(h) = σ(W₂ ReLU(W₁h + b₁) + b₂) ∈ (0, 1)^{B×T}, the halting probability.
#[derive(Module, Debug)]
pub struct Router {
    pub fc: Linear,
    pub out: Linear,
}

impl Router {
    pub fn init(c: &TsaConfig, device: &Device) -> Self {
        let (d, hidden) = (c.d_model, c.router_width());
        Self {
            fc: init::unnamed(d, hidden, c.init, Bias::Default, device),
            out: init::unnamed(hidden, 1, c.init, Bias::Value(c.router_bias), device),
        }
    }

    /// The halting logit z, p = σ(z): `h` [B, T, d] → [B, T].
    pub fn logits(&self, h: Tensor<3>) -> Tensor<2> {
        self.out
            .forward(relu(self.fc.forward(h)))
            .squeeze_dim::<2>(2)
    }

    /// `h`: [B, T, d] → p: [B, T].
    pub fn forward(&self, h: Tensor<3>) -> Tensor<2> {
        sigmoid(self.logits(h))
    }
}

/// TSA's gate g [B, T] (the share of block l+1's update each token gets) from the halting
/// logit `z` and p = σ(z), in training (`progress` ∈ [0, 1] of the schedule) or in soft
/// evaluation (`None`: no noise).
pub fn tsa_gate(gate: TsaGate, z: Tensor<2>, p: Tensor<2>, progress: Option<f64>) -> Tensor<2> {
    let soft = soft_gate(p.clone());
    match (gate, progress) {
        (TsaGate::Soft, _) => soft,
        // Evaluated without noise, both hard gates are the inference rule itself.
        (TsaGate::StraightThrough, _) | (TsaGate::Gumbel, None) => {
            straight_through(kept(p).float(), soft)
        }
        (TsaGate::StraightThroughScaled, _) => {
            straight_through(kept(p).float(), soft.clone()) * soft
        }
        (TsaGate::Gumbel, Some(progress)) => {
            let tau = GUMBEL_TAU_END.powf(progress.clamp(0.0, 1.0));
            let u = Tensor::<2>::random(
                z.dims(),
                Distribution::Uniform(1e-6, 1.0 - 1e-6),
                &z.device(),
            );
            let noise = u.clone().log() - (u.neg() + 1.0).log();
            // 1 − p = σ(−z): the keep logit plus logistic noise, sharpened by τ.
            let sample = sigmoid((z.neg() + noise).div_scalar(tau));
            match is_binary(gate, Some(progress)) {
                true => straight_through(sample.clone().greater_equal_elem(0.5).float(), sample),
                false => sample,
            }
        }
    }
}

/// Whether TSA's gate is 0 or 1 in a training pass at `progress` (`None`: evaluation): the
/// straight-through gates always, Gumbel's from `GUMBEL_HARD_FROM` on, the soft gate never.
pub fn is_binary(gate: TsaGate, progress: Option<f64>) -> bool {
    match gate {
        TsaGate::Soft => false,
        TsaGate::StraightThrough | TsaGate::StraightThroughScaled => true,
        TsaGate::Gumbel => progress.is_none_or(|p| p >= GUMBEL_HARD_FROM),
    }
}

/// The paper's gate g = 1 − p (§2.3): the share of block l+1's update a token gets.
pub fn soft_gate(p: Tensor<2>) -> Tensor<2> {
    p.neg() + 1.0
}

/// The value of `hard` (exactly: s − s is 0) with the gradient of `soft`.
fn straight_through(hard: Tensor<2>, soft: Tensor<2>) -> Tensor<2> {
    hard + (soft.clone() - soft.detach())
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
