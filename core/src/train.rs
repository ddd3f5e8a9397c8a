//! The trainer: one optimiser step and one evaluation, both awaitable so the browser can drive
//! them; no synchronous tensor read on either path.

use burn::module::{Module, ParamGroup};
use burn::optim::{GradientsParams, ModuleOptimizer};
use burn::tensor::{Device, Tensor};

use crate::config::TsaConfig;
use crate::data::Batch;
use crate::error::{Result, TsaError};
use crate::loss::{self, cross_entropy};
use crate::metrics;
use crate::model::{Execution, TsaModel};
use crate::optim::{self, TrainConfig};
use crate::read;

/// What one step reports (all values read back once, asynchronously).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct StepStats {
    /// Steps completed, this one included.
    pub step: usize,
    /// The minimised objective (task loss + the variant's extra term).
    pub loss: f32,
    /// Cross-entropy of the final prediction, nats.
    pub task_loss: f32,
    /// Active fraction α of this batch as trained (soft 1 − p, or the hard gate's 0/1; 1 without
    /// routers).
    pub alpha: f32,
    /// Executed α of this batch: the share of token-layers with p ≤ 0.5 (what inference runs).
    pub executed_alpha: f32,
    /// The compute target's multiplier μ after this step (0 without a target).
    pub mu: f64,
    /// Global gradient norm before clipping.
    pub grad_norm: f32,
    pub lr: f64,
}

/// Evaluation over a fixed set of batches.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct EvalStats {
    /// Mean cross-entropy, nats.
    pub loss: f64,
    pub bpc: f64,
    /// α as this execution gates (soft: mean of 1 − p; hard and sparse: the executed mask).
    pub alpha: f64,
    pub tlops_saved: f64,
    /// α under the inference rule p ≤ 0.5, whatever the execution: what sparse inference runs.
    pub executed_alpha: f64,
    pub executed_tlops_saved: f64,
    /// Per router, the share of tokens in each tenth of p ∈ [0, 1] (empty without routers).
    pub p_histogram: Vec<Vec<f64>>,
    /// Token accuracy of the argmax prediction over the scored positions.
    pub accuracy: f64,
}

pub struct Trainer {
    /// The model being trained, on an autodiff device.
    pub model: TsaModel,
    pub config: TrainConfig,
    /// Optimiser steps completed.
    pub step: usize,
    /// Lagrange multiplier of the compute target (TSA with `target`): added to λ.
    pub mu: f64,
    pub(crate) optim: ModuleOptimizer,
    /// The routers' parameters, for their learning-rate scale.
    routers: ParamGroup,
}

/// Step size of the compute target's multiplier: μ ← μ + η·(executed α − target).
pub const TARGET_STEP: f64 = 0.002;

impl Trainer {
    /// A fresh model on `device` (autodiff is added if missing), seeded by `train.seed`.
    pub fn new(model: &TsaConfig, train: TrainConfig, device: &Device) -> Result<Self> {
        train.validate_for(&model.routing)?;
        let device = if device.is_autodiff() {
            device.clone()
        } else {
            device.clone().autodiff()
        };
        device.seed(train.seed);
        Ok(Self::from_model(model.init(&device)?, train, 0))
    }

    /// Continues training `model` (e.g. loaded from a checkpoint) from `step`.
    pub fn from_model(model: TsaModel, train: TrainConfig, step: usize) -> Self {
        let optim = optim::adamw(&model, &train);
        let routers = optim::router_group(&model);
        Self {
            model,
            config: train,
            step,
            mu: 0.0,
            optim,
            routers,
        }
    }

    /// One optimiser step on `batch`. A non-finite loss or gradient leaves the model and the
    /// optimiser as they were and returns [`TsaError::NonFiniteLoss`].
    pub async fn step(&mut self, batch: &Batch) -> Result<StepStats> {
        let routing = self.model.config.routing;
        let progress = self.step as f64 / self.config.steps.max(1) as f64;
        let out = self.model.forward(
            batch.inputs.clone(),
            Execution::Train {
                progress,
                skip_halted: self.config.skip_halted,
            },
        );
        let alpha = metrics::alpha(&out.active);
        let executed = metrics::executed_alpha(&out.halting);
        let obj = loss::objective(
            routing,
            &out,
            batch.targets.clone(),
            batch.mask.clone(),
            self.mu,
        );
        let grads = GradientsParams::from_grads(obj.total.backward(), &self.model);
        let (grads, norm) = optim::clip_global_norm(&self.model, grads, self.config.grad_clip);

        let device = norm.device();
        let or_one = |a: Option<Tensor<1>>| {
            a.map(|a| a.detach().inner())
                .unwrap_or_else(|| Tensor::ones([1], &device))
        };
        let stats = Tensor::cat(
            vec![
                obj.total.detach().inner(),
                obj.task.detach().inner(),
                or_one(alpha),
                norm,
                or_one(executed),
            ],
            0,
        );
        let v = read::floats(stats).await?;
        if let Some(&bad) = v.iter().find(|x| !x.is_finite()) {
            return Err(TsaError::NonFiniteLoss {
                step: self.step + 1,
                value: bad,
            });
        }

        let lr = self.config.lr_at(self.step);
        let lrs = optim::learning_rates(&self.config, &self.routers, lr)?;
        self.model = self.optim.step(lrs, self.model.clone(), grads);
        self.step += 1;
        if let crate::Routing::Tsa {
            target: Some(target),
            ..
        } = routing
        {
            // Two-sided: below the target μ turns negative and buys compute back (a gate that
            // closed early gets the chance to reopen).
            let target = self.config.target_at(target, self.step - 1);
            self.mu += TARGET_STEP * (v[4] as f64 - target);
        }
        Ok(StepStats {
            step: self.step,
            loss: v[0],
            task_loss: v[1],
            alpha: v[2],
            grad_norm: v[3],
            executed_alpha: v[4],
            mu: self.mu,
            lr,
        })
    }

    /// The model without autodiff, for evaluation and inference.
    pub fn inference_model(&self) -> TsaModel {
        self.model.valid()
    }
}

/// Mean loss, α (as gated and as executed), accuracy and the halting histogram over `batches`,
/// reading back once at the end.
pub async fn evaluate(model: &TsaModel, batches: &[Batch], exec: Execution) -> Result<EvalStats> {
    if batches.is_empty() {
        return Err(TsaError::InvalidConfig(
            "evaluation needs at least one batch".into(),
        ));
    }
    let mut rows = Vec::with_capacity(batches.len());
    for batch in batches {
        let out = model.forward(batch.inputs.clone(), exec);
        let device = out.logits.device();
        let one = || Tensor::ones([1], &device);
        let alpha = metrics::alpha(&out.active).unwrap_or_else(one);
        let executed = metrics::executed_alpha(&out.halting).unwrap_or_else(one);
        let [b, t] = batch.targets.dims();
        let hits = out
            .logits
            .clone()
            .argmax(2)
            .reshape([b, t])
            .equal(batch.targets.clone())
            .float();
        let mask = batch
            .mask
            .clone()
            .unwrap_or_else(|| Tensor::ones([b, t], &device));
        let accuracy = (hits * mask.clone()).sum().div(mask.sum().clamp_min(1.0));
        let ce = cross_entropy(out.logits, batch.targets.clone(), batch.mask.clone());
        let mut row = vec![ce, alpha, executed, accuracy];
        if let Some(hist) = metrics::halting_histogram(&out.halting) {
            row.push(hist.reshape([out.halting.len() * metrics::HIST_BINS]));
        }
        rows.push(Tensor::cat(row, 0));
    }
    let width = rows[0].dims()[0];
    let v = read::floats(Tensor::stack::<2>(rows, 0)).await?;
    let n = batches.len() as f64;
    let mean = |k: usize| {
        v.iter()
            .skip(k)
            .step_by(width)
            .map(|&x| x as f64)
            .sum::<f64>()
            / n
    };
    let (loss, alpha, executed_alpha, accuracy) = (mean(0), mean(1), mean(2), mean(3));
    if !loss.is_finite() {
        return Err(TsaError::NonFiniteEval { value: loss as f32 });
    }
    let p_histogram = (0..(width - 4) / metrics::HIST_BINS)
        .map(|r| {
            (0..metrics::HIST_BINS)
                .map(|k| mean(4 + r * metrics::HIST_BINS + k))
                .collect()
        })
        .collect();
    let layers = model.config.n_layers;
    Ok(EvalStats {
        loss,
        bpc: metrics::bpc(loss),
        alpha,
        tlops_saved: metrics::tlops_saved(alpha, layers),
        executed_alpha,
        executed_tlops_saved: metrics::tlops_saved(executed_alpha, layers),
        p_histogram,
        accuracy,
    })
}
