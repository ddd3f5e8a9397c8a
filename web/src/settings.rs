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

    /// The form describing a loaded model: its shape, dropout and routing. A routing the form
    /// offers no choice for (MoD, early exit, from `native-bench`) leaves the model fields as
    /// they were.
    pub fn describe(&mut self, config: &TsaConfig) {
        self.d_model = config.d_model;
        self.n_layers = config.n_layers;
        self.n_heads = config.n_heads;
        self.d_ff = config.d_ff;
        self.context = config.context;
        self.dropout = config.dropout;
        match config.routing {
            Routing::Dense => self.tsa = false,
            Routing::Tsa {
                lambda,
                gate,
                target,
                ..
            } => {
                self.tsa = true;
                (self.lambda, self.gate, self.target) = (lambda, gate, target);
            }
            Routing::EarlyExit | Routing::MixtureOfDepths { .. } => {}
        }
        self.skip_halted &= self.routing().gates_hard_in_training();
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

/// The most memory a model may need to train in the page, by [`training_bytes`]'s estimate. A
/// wasm32 worker has 4 GiB at most, and running out aborts it (the model with it) instead of
/// failing politely; the `paper` preset estimates ~1.3 GB.
pub const PAGE_MEMORY_BYTES: f64 = 3.0 * (1u64 << 30) as f64;

/// A coarse estimate of what training `config` at `batch` holds: the weights with their
/// gradients and AdamW's two moments (4 × 4 bytes each), and per token and block the activations
/// kept for the backward pass (about 9·d + 2·d_ff values, and two H × T attention rows). Within a
/// factor of two; meant to catch a typo (d = 4096), not to budget.
pub fn training_bytes(config: &TsaConfig, batch: usize) -> f64 {
    let (d, ff, l) = (
        config.d_model as f64,
        config.d_ff as f64,
        config.n_layers as f64,
    );
    let (t, h) = (config.context as f64, config.n_heads as f64);
    let params = (config.vocab_size as f64 + t) * d + l * (4.0 * d * d + 2.0 * d * ff);
    let activations = batch as f64 * t * l * (9.0 * d + 2.0 * ff + 2.0 * h * t);
    16.0 * params + 4.0 * activations
}

/// Refuses a model too large to train in the page (see [`PAGE_MEMORY_BYTES`]).
pub fn fits_in_page(config: &TsaConfig, batch: usize) -> Result<(), String> {
    let need = training_bytes(config, batch);
    match need <= PAGE_MEMORY_BYTES {
        true => Ok(()),
        false => Err(format!(
            "d {}, L {}, d_ff {}, context {} at batch {} needs about {:.1} GB to train, more \
             than the page can hold ({:.0} GB): make it smaller",
            config.d_model,
            config.n_layers,
            config.d_ff,
            config.context,
            batch,
            need / 1e9,
            PAGE_MEMORY_BYTES / 1e9
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasm_bindgen_test::wasm_bindgen_test;

    #[wasm_bindgen_test]
    fn every_preset_fits_in_the_page_and_a_typo_does_not() {
        for preset in [Preset::Micro, Preset::Tiny, Preset::Quick, Preset::Paper] {
            let s = Settings::preset(preset);
            let model = s.model(65).expect("the preset's model");
            assert!(fits_in_page(&model, s.batch).is_ok(), "{preset:?}");
        }
        let paper = Settings::preset(Preset::Paper);
        let huge = paper.clone().with_d_model(4096);
        let model = huge.model(65).expect("a valid shape");
        let refused = fits_in_page(&model, huge.batch).expect_err("d = 4096 is refused");
        assert!(refused.contains("GB"), "{refused}");
        // The estimate grows with the batch: the paper's model at batch 4096 is refused too.
        let model = paper.model(65).expect("the paper's model");
        assert!(fits_in_page(&model, 4096).is_err());
    }

    #[wasm_bindgen_test]
    fn the_form_describes_a_loaded_model_so_start_builds_the_same_shape() {
        let routing = Routing::Tsa {
            lambda: 0.0,
            gate: TsaGate::StraightThroughScaled,
            target: Some(0.5),
            commit: 0.0,
        };
        let loaded = Preset::Paper.recipe(65, routing).model.with_n_layers(8);
        let mut form = Settings::preset(Preset::Tiny);
        form.skip_halted = true;
        form.describe(&loaded);
        let built = form.model(65).expect("the described model");
        assert_eq!(
            (
                built.d_model,
                built.n_layers,
                built.n_heads,
                built.d_ff,
                built.context
            ),
            (
                loaded.d_model,
                8,
                loaded.n_heads,
                loaded.d_ff,
                loaded.context
            )
        );
        assert_eq!(built.routing, loaded.routing);
        assert_eq!(built.dropout, loaded.dropout);
        assert!(
            form.skip_halted,
            "a gate that halts outright keeps the option"
        );
        // A dense model: the form says dense, and skipping halted tokens no longer applies.
        form.describe(&loaded.clone().with_routing(Routing::Dense));
        assert!(!form.tsa && !form.skip_halted);
    }
}
