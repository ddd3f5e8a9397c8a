//! What the visitor chooses before pressing Start, and how it becomes a model and a schedule.

use serde::{Deserialize, Serialize};
use tsa_core::{Recipe, Routing, TrainConfig, TsaConfig, TsaGate};

/// The app offers tsa-core's `tiny` and `paper` recipes.
pub use tsa_core::Preset;

/// The form's values. Heads and context follow the preset; the rest can be edited.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Settings {
    pub preset: Preset,
    pub d_model: usize,
    pub n_layers: usize,
    pub n_heads: usize,
    pub d_ff: usize,
    pub context: usize,
    /// `false` trains the dense baseline.
    pub tsa: bool,
    /// TSA's gate in training: the paper's soft gate, or one whose forward pass executes.
    #[serde(default)]
    pub gate: TsaGate,
    /// A requested executed α, held by the trainer's multiplier μ (None: λ alone).
    #[serde(default)]
    pub target: Option<f64>,
    pub lambda: f64,
    pub lr: f64,
    /// The routers learn at this multiple of `lr` (at the paper's 3e-4 they barely move:
    /// docs/RESULTS.md, "The paper's recipe at the quick shape").
    #[serde(default = "one")]
    pub router_lr_scale: f64,
    /// Tokens a hard gate halts skip the FFN in training too (`TrainConfig::skip_halted`): on
    /// the CPU backend only, since it reads the keep mask back inside the forward pass.
    #[serde(default)]
    pub skip_halted: bool,
    pub batch: usize,
    pub steps: usize,
    /// Evaluate (validation loss, heatmap) every this many steps.
    pub eval_every: usize,
    /// Follow the preset's recipe (not editable).
    pub dropout: f64,
    pub warmup: usize,
}

impl Settings {
    /// The preset's values, read from tsa-core's recipes (no retyped copy).
    pub fn preset(preset: Preset) -> Self {
        // Tiny keeps the paper's λ = 0.001. λ = 0.05 was tried and measured (docs/RESULTS.md):
        // the routers closed almost every gate (α 0.02) while the blocks scaled their updates up
        // to compensate, so the heatmap showed nothing. Paper: the paper's LM recipe (lr 3e-4,
        // no warm-up, dropout 0.1, batch 64, 5,000 steps).
        let recipe = preset.recipe(1, Routing::tsa(0.001));
        let (m, t) = (&recipe.model, &recipe.train);
        Self {
            preset,
            d_model: m.d_model,
            n_layers: m.n_layers,
            n_heads: m.n_heads,
            d_ff: m.d_ff,
            context: m.context,
            tsa: true,
            gate: TsaGate::Soft,
            target: None,
            lambda: 0.001,
            lr: t.lr,
            router_lr_scale: t.router_lr_scale,
            skip_halted: false,
            batch: t.batch_size,
            steps: t.steps,
            eval_every: recipe.eval_every,
            dropout: m.dropout,
            warmup: t.warmup_steps,
        }
    }

    /// The model, refusing shapes that cannot be built (with the reason).
    pub fn model(&self, vocab_size: usize) -> Result<TsaConfig, String> {
        if !(self.lambda.is_finite() && self.lambda >= 0.0) {
            return Err("λ must be a number ≥ 0".into());
        }
        let routing = self.routing();
        // The preset's model with the form's values; d_ff stays 4·d when d is edited.
        let config = self
            .recipe(vocab_size)
            .model
            .with_d_model(self.d_model)
            .with_n_layers(self.n_layers)
            .with_n_heads(self.n_heads)
            .with_d_ff(self.d_ff)
            .with_context(self.context)
            .with_dropout(self.dropout)
            .with_routing(routing);
        config.validate().map_err(|e| e.to_string())?;
        Ok(config)
    }

    pub fn train(&self) -> Result<TrainConfig, String> {
        if self.eval_every == 0 {
            return Err("evaluate-every must be at least 1".into());
        }
        // The preset's schedule (weight decay, clipping, cosine floor) with the form's values.
        let config = self
            .recipe(1)
            .train
            .with_lr(self.lr)
            .with_router_lr_scale(self.router_lr_scale)
            .with_skip_halted(self.skip_halted)
            .with_batch_size(self.batch)
            .with_steps(self.steps)
            .with_warmup_steps(self.warmup.min(self.steps / 10));
        config
            .validate_for(&self.routing())
            .map_err(|e| e.to_string())?;
        Ok(config)
    }

    /// The routing variant the form describes.
    pub fn routing(&self) -> Routing {
        match self.tsa {
            true => Routing::Tsa {
                lambda: self.lambda,
                gate: self.gate,
                target: self.target,
                commit: 0.0,
            },
            false => Routing::Dense,
        }
    }

    fn recipe(&self, vocab_size: usize) -> Recipe {
        self.preset.recipe(vocab_size, Routing::Dense)
    }

    /// Sets d (and d_ff = 4d), keeping the heads if they still divide it.
    pub fn with_d_model(mut self, d: usize) -> Self {
        self.d_model = d;
        self.d_ff = 4 * d;
        self
    }
}

/// Settings saved before the field existed train their routers at the blocks' rate.
fn one() -> f64 {
    1.0
}
