//! AdamW with the paper's parameter groups, the learning-rate schedule, and global-norm clipping.

use burn::config::Config;
use burn::lr_scheduler::LrSchedulerConfig;
use burn::lr_scheduler::module_lr_scheduler::{ModuleLearningRate, ModuleLrSchedulerConfig};
use burn::module::{Module, ModuleVisitor, Param, ParamGroup};
use burn::optim::{AdamWConfig, GradientsParams, ModuleOptimizer};
use burn::tensor::Tensor;

use crate::model::TsaModel;

/// Optimiser and schedule settings (Appendix A: AdamW β = (0.9, 0.95), weight decay 0.1).
#[derive(Config, Debug, PartialEq)]
pub struct TrainConfig {
    /// Peak learning rate.
    #[config(default = 3e-4)]
    pub lr: f64,
    /// The cosine schedule decays to `lr · min_lr_ratio`.
    #[config(default = 0.1)]
    pub min_lr_ratio: f64,
    /// Linear warm-up steps before the cosine decay.
    #[config(default = 100)]
    pub warmup_steps: usize,
    /// Total optimiser steps (the length of the schedule).
    #[config(default = 5000)]
    pub steps: usize,
    #[config(default = 64)]
    pub batch_size: usize,
    /// Decoupled weight decay of the weight matrices (biases, norms and embeddings get 0).
    #[config(default = 0.1)]
    pub weight_decay: f64,
    /// Clip the global gradient norm to this value (0 disables).
    #[config(default = 1.0)]
    pub grad_clip: f64,
    /// Seeds parameter initialisation and batch sampling.
    #[config(default = 1337)]
    pub seed: u64,
    /// TSA's compute target falls linearly from α = 1 to the requested α* over this share of
    /// training (0: α* from the first step), so the model learns its task with every block
    /// before it learns which tokens may skip them.
    #[config(default = 0.0)]
    pub target_ramp: f64,
    /// The routers learn at this multiple of the blocks' learning rate (same schedule). At the
    /// paper's lr 3e-4 a router barely leaves its initialisation in 5,000 steps (issue 15),
    /// while the blocks need that small rate.
    #[config(default = 1.0)]
    pub router_lr_scale: f64,
    /// Tokens a hard training gate halts (straight-through, Gumbel's hard phase, MoD) skip the
    /// FFN in training too, by gathered rows ([`crate::gate::Gate::from_values`]): faster on
    /// the CPU, where the host read of the mask is cheap; TSA's routers then no longer learn
    /// through the FFN update of the tokens they halt.
    #[config(default = false)]
    pub skip_halted: bool,
}

impl TrainConfig {
    /// Linear warm-up to `lr`, then cosine decay to `lr · min_lr_ratio` at `steps`.
    pub fn lr_at(&self, step: usize) -> f64 {
        if step < self.warmup_steps {
            return self.lr * (step + 1) as f64 / self.warmup_steps as f64;
        }
        let span = self.steps.saturating_sub(self.warmup_steps).max(1) as f64;
        let progress = ((step - self.warmup_steps) as f64 / span).min(1.0);
        let min = self.lr * self.min_lr_ratio;
        min + 0.5 * (self.lr - min) * (1.0 + (std::f64::consts::PI * progress).cos())
    }

    /// The executed α the compute target asks for at `step`, for a final target `target`.
    pub fn target_at(&self, target: f64, step: usize) -> f64 {
        if self.target_ramp <= 0.0 {
            return target;
        }
        let ramp = self.target_ramp * self.steps.max(1) as f64;
        let done = (step as f64 / ramp).min(1.0);
        1.0 - (1.0 - target) * done
    }

    pub fn validate(&self) -> crate::error::Result<()> {
        let bad = |why: &str| Err(crate::error::TsaError::InvalidConfig(why.into()));
        if !(self.lr.is_finite() && self.lr > 0.0) {
            return bad("learning rate must be finite and > 0");
        }
        if !(0.0..=1.0).contains(&self.min_lr_ratio) {
            return bad("min_lr_ratio must be in [0, 1]");
        }
        if self.batch_size == 0 || self.steps == 0 {
            return bad("batch_size and steps must be at least 1");
        }
        if !(self.weight_decay >= 0.0 && self.grad_clip >= 0.0) {
            return bad("weight_decay and grad_clip must be ≥ 0");
        }
        if !(0.0..=1.0).contains(&self.target_ramp) {
            return bad("target_ramp must be in [0, 1] (a share of training)");
        }
        if !(self.router_lr_scale.is_finite() && self.router_lr_scale > 0.0) {
            return bad("router_lr_scale must be finite and > 0");
        }
        Ok(())
    }

    /// [`Self::validate`], and whether its options fit `routing`.
    pub fn validate_for(&self, routing: &crate::config::Routing) -> crate::error::Result<()> {
        self.validate()?;
        if self.skip_halted && !routing.gates_hard_in_training() {
            return Err(crate::error::TsaError::InvalidConfig(format!(
                "skip_halted needs a training gate that halts tokens outright (TSA's \
                 straight-through or Gumbel gate, or MoD); {}'s halts none, so there is \
                 nothing to skip",
                routing.label()
            )));
        }
        Ok(())
    }
}

/// Parameter paths (Burn's dotted module paths) by weight-decay group.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DecayGroups {
    pub decay: Vec<String>,
    pub no_decay: Vec<String>,
}

/// The one rule: matrices decay, except the embeddings (token — also the tied head — and
/// position); vectors (biases, LayerNorm γ and β) never decay.
pub fn decays(path: &str, rank: usize) -> bool {
    rank >= 2 && !path.starts_with("tok_emb") && !path.starts_with("pos_emb")
}

pub fn decay_groups(model: &TsaModel) -> DecayGroups {
    struct Collect {
        path: Vec<String>,
        groups: DecayGroups,
    }
    impl ModuleVisitor for Collect {
        fn enter_module(&mut self, name: &str, _: &str) {
            self.path.push(name.to_string());
        }
        fn exit_module(&mut self, _: &str, _: &str) {
            self.path.pop();
        }
        fn visit_float<const D: usize>(&mut self, _param: &Param<Tensor<D>>) {
            let path = self.path.join(".");
            match decays(&path, D) {
                true => self.groups.decay.push(path),
                false => self.groups.no_decay.push(path),
            }
        }
    }
    let mut c = Collect {
        path: Vec::new(),
        groups: DecayGroups::default(),
    };
    model.visit(&mut c);
    c.groups
}

/// The routers' parameters (`routers.…`), the group `router_lr_scale` applies to.
pub fn router_group(model: &TsaModel) -> ParamGroup {
    let g = decay_groups(model);
    let routers: Vec<String> = g
        .decay
        .into_iter()
        .chain(g.no_decay)
        .filter(|p| p.starts_with("routers."))
        .collect();
    ParamGroup::from_paths(routers)
}

/// Every parameter's learning rate for a step at rate `lr`: `lr`, times `router_lr_scale` on
/// the `routers` group (from [`router_group`]).
pub fn learning_rates(
    config: &TrainConfig,
    routers: &ParamGroup,
    lr: f64,
) -> crate::error::Result<ModuleLearningRate> {
    if config.router_lr_scale == 1.0 {
        return Ok(lr.into());
    }
    ModuleLrSchedulerConfig::new(LrSchedulerConfig::Constant(lr))
        .with_group(
            routers.clone(),
            LrSchedulerConfig::Constant(lr * config.router_lr_scale),
        )
        .init()
        .map(|mut s| s.step())
        .map_err(crate::error::TsaError::InvalidConfig)
}

/// AdamW(β = 0.9, 0.95) with decay on the `decay` group and none on the rest.
pub fn adamw(model: &TsaModel, config: &TrainConfig) -> ModuleOptimizer {
    let base = AdamWConfig::new()
        .with_beta_1(0.9)
        .with_beta_2(0.95)
        .with_epsilon(1e-8);
    let groups = decay_groups(model);
    base.clone()
        .with_weight_decay(config.weight_decay as f32)
        .init()
        .with_group(
            ParamGroup::from_paths(groups.no_decay),
            base.with_weight_decay(0.0).build(),
            None,
        )
}

/// Scales all gradients by min(1, max_norm / ‖g‖₂) over the whole model, without reading back
/// to the host (the scale stays a tensor). Returns the clipped gradients and ‖g‖₂ before clipping.
pub fn clip_global_norm(
    model: &TsaModel,
    mut grads: GradientsParams,
    max_norm: f64,
) -> (GradientsParams, Tensor<1>) {
    struct SumSquares<'a> {
        grads: &'a GradientsParams,
        total: Option<Tensor<1>>,
    }
    impl ModuleVisitor for SumSquares<'_> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            if let Some(g) = self.grads.get::<D>(param.id) {
                let s = g.square().sum();
                self.total = Some(match self.total.take() {
                    Some(t) => t + s,
                    None => s,
                });
            }
        }
    }
    struct Scale<'a> {
        grads: &'a mut GradientsParams,
        scale: Tensor<1>,
    }
    impl ModuleVisitor for Scale<'_> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            if let Some(g) = self.grads.remove::<D>(param.id) {
                let g = g * self.scale.clone().reshape([1; D]);
                self.grads.register(param.id, g);
            }
        }
    }

    let mut ss = SumSquares {
        grads: &grads,
        total: None,
    };
    model.visit(&mut ss);
    let device = model.device();
    let norm = ss
        .total
        .map(|t| t.sqrt())
        .unwrap_or_else(|| Tensor::zeros([1], &device));
    if max_norm > 0.0 {
        let scale = norm
            .clone()
            .add_scalar(1e-6)
            .recip()
            .mul_scalar(max_norm)
            .clamp_max(1.0);
        let mut sc = Scale {
            grads: &mut grads,
            scale,
        };
        model.visit(&mut sc);
    }
    (grads, norm)
}
