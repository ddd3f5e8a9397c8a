//! Named recipes: a model shape and the training schedule that goes with it, in one place, so
//! that the CLI, `reproduce`, the web app and the tests train the same thing under the same name.

use serde::{Deserialize, Serialize};

use crate::config::{Routing, TsaConfig};
use crate::optim::TrainConfig;

/// A model and how to train and evaluate it.
#[derive(Debug, Clone, PartialEq)]
pub struct Recipe {
    pub name: &'static str,
    pub model: TsaConfig,
    pub train: TrainConfig,
    /// Evaluate every this many steps, on this many validation batches.
    pub eval_every: usize,
    pub eval_batches: usize,
}

impl Recipe {
    /// The paper's language model (§3.2) with the paper authors' published training code:
    /// AdamW β = (0.9, 0.95), weight decay 0.1 (not on biases, norms, embeddings), lr 3e-4
    /// cosine to 3e-5 with no warm-up, gradient clipping at 1.0, dropout 0.1, batch 64,
    /// context 128, 5,000 steps.
    pub fn paper_lm(vocab_size: usize, routing: Routing) -> Self {
        Self {
            name: "paper",
            model: TsaConfig::paper_lm(vocab_size, routing).with_dropout(0.1),
            train: TrainConfig::new()
                .with_lr(3e-4)
                .with_min_lr_ratio(0.1)
                .with_warmup_steps(0)
                .with_steps(5000)
                .with_batch_size(64)
                .with_weight_decay(0.1)
                .with_grad_clip(1.0),
            eval_every: 250,
            eval_batches: 20,
        }
    }

    /// Quick scale: a smaller language model that trains in minutes on a 2-core CPU (d=128, L=6,
    /// H=4, d_ff=512, context 64, batch 16, lr 2e-3 cosine to 2e-4, no warm-up, no dropout,
    /// 600 steps). The PyTorch comparison of issue 13 was run with exactly this.
    pub fn quick_lm(vocab_size: usize, routing: Routing) -> Self {
        Self {
            name: "quick",
            model: TsaConfig::new(vocab_size)
                .with_d_model(128)
                .with_n_heads(4)
                .with_d_ff(512)
                .with_context(64)
                .with_routing(routing),
            train: TrainConfig::new()
                .with_lr(2e-3)
                .with_warmup_steps(0)
                .with_steps(600)
                .with_batch_size(16),
            eval_every: 100,
            eval_batches: 16,
        }
    }

    /// The synthetic copy/sort tasks (§3.1): d=128, L=6, H=4, d_ff=512, AdamW lr 3e-4, weight
    /// decay 0.1, 10,000 steps (batch 64: the paper does not say; cosine, no warm-up as in the
    /// LM recipe).
    pub fn synthetic(routing: Routing) -> Self {
        Self {
            name: "synthetic",
            model: TsaConfig::paper_synthetic(routing),
            train: TrainConfig::new()
                .with_lr(3e-4)
                .with_warmup_steps(0)
                .with_steps(10_000)
                .with_batch_size(64),
            eval_every: 250,
            eval_batches: 10,
        }
    }

    /// The synthetic tasks at quick scale: 1,500 steps of batch 32 at 3× the learning rate.
    pub fn synthetic_quick(routing: Routing) -> Self {
        let paper = Self::synthetic(routing);
        Self {
            name: "synthetic-quick",
            train: paper
                .train
                .with_lr(9e-4)
                .with_steps(1_500)
                .with_batch_size(32),
            ..paper
        }
    }

    /// A model that trains in about a minute on a CPU or in a browser tab (d=64, L=4, context
    /// 64, batch 16, lr 3e-3, 400 steps).
    pub fn tiny(vocab_size: usize, routing: Routing) -> Self {
        Self {
            name: "tiny",
            model: TsaConfig::tiny(vocab_size, routing),
            train: TrainConfig::new()
                .with_lr(3e-3)
                .with_warmup_steps(40)
                .with_steps(400)
                .with_batch_size(16),
            eval_every: 50,
            eval_batches: 4,
        }
    }

    /// The tests' model: d=32, L=3, H=2, d_ff=64, context 16; ten steps of batch 4 at lr 1e-2.
    pub fn micro(vocab_size: usize, routing: Routing) -> Self {
        Self {
            name: "micro",
            model: TsaConfig::new(vocab_size)
                .with_d_model(32)
                .with_n_layers(3)
                .with_n_heads(2)
                .with_d_ff(64)
                .with_context(16)
                .with_routing(routing),
            train: TrainConfig::new()
                .with_lr(1e-2)
                .with_warmup_steps(1)
                .with_steps(10)
                .with_batch_size(4),
            eval_every: 5,
            eval_batches: 1,
        }
    }
}

/// The named language-model recipes, for command lines and the web app's presets (the synthetic
/// tasks have their own: [`Recipe::synthetic`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum Preset {
    /// The paper's LM recipe (§3.2 + the authors' code: lr 3e-4, no warm-up, dropout 0.1).
    Paper,
    /// Quick scale: d=128, context 64, batch 16, lr 2e-3, 600 steps.
    Quick,
    /// Trains in about a minute on a CPU or in a browser tab (the web app's default).
    Tiny,
    /// The tests' model: d=32, L=3, context 16.
    Micro,
}

impl Preset {
    pub const ALL: [Preset; 4] = [Preset::Paper, Preset::Quick, Preset::Tiny, Preset::Micro];

    pub fn recipe(self, vocab_size: usize, routing: Routing) -> Recipe {
        match self {
            Preset::Paper => Recipe::paper_lm(vocab_size, routing),
            Preset::Quick => Recipe::quick_lm(vocab_size, routing),
            Preset::Tiny => Recipe::tiny(vocab_size, routing),
            Preset::Micro => Recipe::micro(vocab_size, routing),
        }
    }

    /// The recipe's name (`paper`, `quick`, `tiny`, `micro`).
    pub fn name(self) -> &'static str {
        self.recipe(1, Routing::Dense).name
    }

    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.name() == name)
    }
}
