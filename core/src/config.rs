//! Model configuration: the shapes of the decoder and which routing variant gates its blocks.

use burn::config::Config;
use serde::{Deserialize, Serialize};

use crate::error::TsaError;
use crate::model::TsaModel;
use crate::routing::{KeepScale, ROUTER_FINAL_BIAS};

/// How the blocks after the stem are gated. The model is one type; its variants are data.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Routing {
    /// Baseline: every block runs for every token.
    Dense,
    /// Token-Selective Attention (§2): a router after each block but the last; the next block's
    /// residual updates are scaled by the gate (`1 − p_l` for the paper's soft gate); `λ·α` is
    /// added to the loss (§2.4).
    Tsa {
        lambda: f64,
        /// How the gate is trained (the paper's soft gate unless set).
        #[serde(default)]
        gate: TsaGate,
        /// A requested *executed* α (share of token-layers that run), held by a Lagrange
        /// multiplier μ on the depth loss: μ rises while the batch's executed α is above the
        /// target and falls (below zero if need be) while it is under (the trainer holds μ).
        #[serde(default)]
        target: Option<f64>,
        /// Commitment weight β: adds β·mean 4p(1 − p) over routers and tokens, which is 1 at
        /// p = 0.5 and 0 at a sure decision, so halting probabilities leave the threshold (0 is
        /// the paper's objective).
        #[serde(default)]
        commit: f64,
    },
    /// Early exit (Elbayad et al., 2020): an exit classifier after every block, trained with the
    /// uniform mean of their cross-entropies; at inference a token stops at the first exit whose
    /// max softmax probability passes a threshold.
    EarlyExit,
    /// Mixture-of-Depths (Raposo et al., 2024): in each routed block only the `capacity` fraction
    /// of each sequence with the highest router weight is updated (expert-choice top-k, which is
    /// not causal), and the update is multiplied by that weight.
    MixtureOfDepths { capacity: f64 },
}

/// A routing variant without its parameters (command lines: `--routing tsa --lambda 0.01`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum RoutingKind {
    Dense,
    Tsa,
    EarlyExit,
    /// Mixture-of-Depths.
    Mod,
}

impl RoutingKind {
    /// The variant with its parameters (each used only by its own variant).
    pub fn with(
        self,
        lambda: f64,
        gate: TsaGate,
        target: Option<f64>,
        commit: f64,
        capacity: f64,
    ) -> Routing {
        match self {
            RoutingKind::Dense => Routing::Dense,
            RoutingKind::Tsa => Routing::Tsa {
                lambda,
                gate,
                target,
                commit,
            },
            RoutingKind::EarlyExit => Routing::EarlyExit,
            RoutingKind::Mod => Routing::MixtureOfDepths { capacity },
        }
    }
}

/// How TSA's gate behaves in training. Inference always executes the same causal rule — a token
/// runs block l+1 when p_l ≤ 0.5 — so the question is only whether training sees that rule.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum TsaGate {
    /// The paper (§2.3): h += (1 − p)·Δ. What trains is not what runs: thresholding it later
    /// drops the partial updates the model learned to rely on.
    #[default]
    Soft,
    /// Straight-through: the forward pass executes the binary decision (kept tokens get the full
    /// update, halted ones none: exactly what sparse inference runs); the backward pass uses the
    /// gradient of the soft gate 1 − p.
    StraightThrough,
    /// Straight-through, with kept tokens' updates scaled by 1 − p (as Mixture-of-Depths scales by
    /// its router weight): the forward pass is keep·(1 − p), exactly what sparse inference with
    /// `KeepScale::OneMinusP` runs; the router also learns through the scale of kept updates.
    StraightThroughScaled,
    /// Gumbel-sigmoid relaxation: the gate is σ((logit(1 − p) + logistic noise)/τ), with τ
    /// annealed geometrically from 1 to 0.05 over training so that it ends (nearly) binary;
    /// the forward pass is hard (straight-through on the sample) in the last fifth of training.
    Gumbel,
}

impl TsaGate {
    /// How kept tokens are scaled at inference so that it matches training.
    pub fn keep_scale(self) -> KeepScale {
        match self {
            TsaGate::Soft | TsaGate::StraightThroughScaled => KeepScale::OneMinusP,
            TsaGate::StraightThrough | TsaGate::Gumbel => KeepScale::One,
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            TsaGate::Soft => "soft",
            TsaGate::StraightThrough => "st",
            TsaGate::StraightThroughScaled => "st-scaled",
            TsaGate::Gumbel => "gumbel",
        }
    }
}

impl Routing {
    /// The paper's TSA: soft gate, depth loss λ, no compute target.
    pub fn tsa(lambda: f64) -> Self {
        Routing::Tsa {
            lambda,
            gate: TsaGate::Soft,
            target: None,
            commit: 0.0,
        }
    }

    /// Whether this variant has a router after each block but the last.
    pub fn has_routers(&self) -> bool {
        matches!(self, Routing::Tsa { .. } | Routing::MixtureOfDepths { .. })
    }

    /// Whether its training gate halts tokens outright (a gate of exactly 0), so that they can
    /// skip work in training too (`TrainConfig::skip_halted`): TSA's hard gates and MoD.
    pub fn gates_hard_in_training(&self) -> bool {
        match self {
            Routing::Tsa { gate, .. } => *gate != TsaGate::Soft,
            Routing::MixtureOfDepths { .. } => true,
            Routing::Dense | Routing::EarlyExit => false,
        }
    }

    /// How sparse inference scales kept tokens for this variant (what its training saw).
    pub fn keep_scale(&self) -> KeepScale {
        match self {
            Routing::Tsa { gate, .. } => gate.keep_scale(),
            _ => KeepScale::OneMinusP,
        }
    }

    /// A short name for tables and logs, e.g. `tsa(λ=0.001)` or `tsa-st(λ=0.01,α*=0.5)`.
    pub fn label(&self) -> String {
        match self {
            Routing::Dense => "dense".into(),
            Routing::Tsa {
                lambda,
                gate,
                target,
                commit,
            } => {
                let gate = match gate {
                    TsaGate::Soft => String::new(),
                    g => format!("-{}", g.label()),
                };
                let target = target.map(|t| format!(",α*={t}")).unwrap_or_default();
                let commit = match *commit {
                    0.0 => String::new(),
                    b => format!(",β={b}"),
                };
                format!("tsa{gate}(λ={lambda}{target}{commit})")
            }
            Routing::EarlyExit => "early_exit".into(),
            Routing::MixtureOfDepths { capacity } => format!("mod(c={capacity})"),
        }
    }
}

/// Initialisation of the linear layers that the paper's Appendix A does not name (attention's
/// QKV, the FFN's first layer, the routers' weights). Named ones are the same in both schemes.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum InitScheme {
    /// PyTorch's `nn.Linear` default, as the paper authors' code leaves them: weights and biases
    /// uniform in ±1/√fan_in. The default: measured faster to train (docs/RESULTS.md).
    #[default]
    Torch,
    /// GPT-2's N(0, 0.02²) weights and zero biases (this project's first choice).
    Normal,
}

/// Shapes of the pre-norm decoder-only transformer (defaults: the paper's §3.2 language model).
#[derive(Config, Debug, PartialEq)]
pub struct TsaConfig {
    /// Number of distinct tokens (65 for Tiny-Shakespeare's characters).
    pub vocab_size: usize,
    /// Model width d.
    #[config(default = 256)]
    pub d_model: usize,
    /// Number of blocks L (block 0 is the stem and always runs).
    #[config(default = 6)]
    pub n_layers: usize,
    /// Attention heads H.
    #[config(default = 8)]
    pub n_heads: usize,
    /// FFN hidden width d_ff.
    #[config(default = 1024)]
    pub d_ff: usize,
    /// Context length: the number of learned positions.
    #[config(default = 128)]
    pub context: usize,
    /// Router hidden width; `None` means d/4 (64 at d=256, which gives the paper's 4,864,901).
    #[config(default = "None")]
    pub router_hidden: Option<usize>,
    /// Which gate the routed blocks use.
    #[config(default = "Routing::tsa(0.001)")]
    pub routing: Routing,
    /// Dropout probability in training (the paper authors' code: 0.1 on the embedding sum, the
    /// attention probabilities, after the FFN's GELU and after its second layer). 0 disables it;
    /// evaluation and inference never drop.
    #[config(default = 0.0)]
    pub dropout: f64,
    /// Initialisation of the layers Appendix A leaves unnamed.
    #[config(default = "InitScheme::Torch")]
    pub init: InitScheme,
    /// Router final-bias initialisation b₂ (§2.2: −1, so p starts at σ(−1) ≈ 0.27).
    #[config(default = "ROUTER_FINAL_BIAS")]
    pub router_bias: f64,
}

impl TsaConfig {
    /// Builds the model ([`TsaModel::new`]: the paper's initialisation, impossible shapes
    /// refused).
    pub fn init(&self, device: &burn::tensor::Device) -> Result<TsaModel, TsaError> {
        TsaModel::new(self, device)
    }

    /// The paper's Tiny-Shakespeare model (§3.2): d=256, L=6, H=8, d_ff=1024, context 128.
    pub fn paper_lm(vocab_size: usize, routing: Routing) -> Self {
        Self::new(vocab_size).with_routing(routing)
    }

    /// The paper's synthetic-task model (§3.1): d=128, L=6, H=4, d_ff=512, 32 tokens. Sequences
    /// are 22 tokens, but 64 learned positions reproduce the paper's sizes (1.20M / 1.22M); with
    /// 22 they would be 1.19M / 1.21M.
    pub fn paper_synthetic(routing: Routing) -> Self {
        Self::new(crate::data::tasks::VOCAB_SIZE)
            .with_d_model(128)
            .with_n_heads(4)
            .with_d_ff(512)
            .with_context(64)
            .with_routing(routing)
    }

    /// A model small enough to train in a minute on a CPU or in a browser tab.
    pub fn tiny(vocab_size: usize, routing: Routing) -> Self {
        Self::new(vocab_size)
            .with_d_model(64)
            .with_n_layers(4)
            .with_n_heads(4)
            .with_d_ff(256)
            .with_context(64)
            .with_routing(routing)
    }

    /// Fills in the fields that configs written before them lack (checkpoints of earlier
    /// versions): no dropout, the N(0, 0.02²) initialisation they were built with, bias −1.
    pub fn upgrade_json(config: &mut serde_json::Value) {
        if let Some(c) = config.as_object_mut() {
            let defaults = [
                ("dropout", serde_json::json!(0.0)),
                ("init", serde_json::json!("normal")),
                ("router_bias", serde_json::json!(ROUTER_FINAL_BIAS)),
            ];
            for (key, value) in defaults {
                c.entry(key).or_insert(value);
            }
        }
    }

    /// Router hidden width (d/4 unless set).
    pub fn router_width(&self) -> usize {
        self.router_hidden.unwrap_or((self.d_model / 4).max(1))
    }

    /// Number of routers: one after each block but the last.
    pub fn n_routers(&self) -> usize {
        self.n_layers.saturating_sub(1)
    }

    /// Refuses shapes the model cannot be built with, with a message saying why.
    pub fn validate(&self) -> Result<(), TsaError> {
        let bad = |why: String| Err(TsaError::InvalidConfig(why));
        if self.vocab_size == 0 {
            return bad("vocab_size must be at least 1".into());
        }
        if self.d_model == 0 || self.n_heads == 0 || self.d_ff == 0 || self.context == 0 {
            return bad("d_model, n_heads, d_ff and context must all be at least 1".into());
        }
        if !self.d_model.is_multiple_of(self.n_heads) {
            return bad(format!(
                "d_model ({}) must be divisible by n_heads ({})",
                self.d_model, self.n_heads
            ));
        }
        if self.n_layers < 2 && self.routing != Routing::Dense {
            return bad(format!(
                "{} needs at least 2 blocks (a stem and one routed block), got {}",
                self.routing.label(),
                self.n_layers
            ));
        }
        if self.n_layers == 0 {
            return bad("n_layers must be at least 1".into());
        }
        if self.router_hidden == Some(0) {
            return bad("router_hidden must be at least 1".into());
        }
        if !(0.0..1.0).contains(&self.dropout) {
            return bad(format!("dropout must be in [0, 1), got {}", self.dropout));
        }
        if !self.router_bias.is_finite() {
            return bad(format!(
                "router_bias must be finite, got {}",
                self.router_bias
            ));
        }
        match self.routing {
            Routing::Tsa { lambda, .. } if !(lambda.is_finite() && lambda >= 0.0) => {
                bad(format!("TSA λ must be finite and ≥ 0, got {lambda}"))
            }
            Routing::Tsa {
                target: Some(t), ..
            } if !(t > 0.0 && t <= 1.0) => bad(format!("TSA target α must be in (0, 1], got {t}")),
            Routing::Tsa { commit, .. } if !(commit.is_finite() && commit >= 0.0) => bad(format!(
                "TSA commitment β must be finite and ≥ 0, got {commit}"
            )),
            Routing::MixtureOfDepths { capacity } if !(capacity > 0.0 && capacity <= 1.0) => {
                bad(format!("MoD capacity must be in (0, 1], got {capacity}"))
            }
            _ => Ok(()),
        }
    }
}
