//! Training objectives: next-token cross-entropy plus each variant's extra term.

use burn::tensor::activation::log_softmax;
use burn::tensor::{Int, Tensor};

use crate::config::Routing;
use crate::metrics;
use crate::model::ModelOutput;

/// Weight of MoD's router auxiliary loss (its BCE against the top-k choice).
pub const MOD_AUX_WEIGHT: f64 = 0.1;

/// Mean cross-entropy of `logits` [B, T, V] against `targets` [B, T], over the positions where
/// `mask` [B, T] is 1 (all positions when `None`), in nats.
pub fn cross_entropy(
    logits: Tensor<3>,
    targets: Tensor<2, Int>,
    mask: Option<Tensor<2>>,
) -> Tensor<1> {
    let [b, t] = targets.dims();
    let nll = log_softmax(logits, 2)
        .gather(2, targets.reshape([b, t, 1]))
        .reshape([b, t])
        .neg();
    match mask {
        None => nll.mean(),
        Some(m) => (nll * m.clone()).sum().div(m.sum().clamp_min(1.0)),
    }
}

/// The loss a step minimises, and its task part (the final prediction's cross-entropy).
#[derive(Debug, Clone)]
pub struct Objective {
    pub total: Tensor<1>,
    pub task: Tensor<1>,
}

/// Task loss plus: for TSA, (λ + μ)·α (§2.4; μ is the compute target's multiplier, 0 without a
/// target) and the commitment term β·mean 4p(1 − p) (absent at β = 0); for early exit, the
/// uniform mean over all exits' losses; for MoD, the router's auxiliary loss.
pub fn objective(
    routing: Routing,
    out: &ModelOutput,
    targets: Tensor<2, Int>,
    mask: Option<Tensor<2>>,
    mu: f64,
) -> Objective {
    let task = cross_entropy(out.logits.clone(), targets.clone(), mask.clone());
    let total = match routing {
        Routing::Dense => task.clone(),
        Routing::Tsa { lambda, commit, .. } => {
            let depth = metrics::depth_loss(lambda + mu, &out.active);
            let commitment = match commit {
                0.0 => None,
                b => metrics::indecision(&out.halting).map(|i| i.mul_scalar(b)),
            };
            [depth, commitment]
                .into_iter()
                .flatten()
                .fold(task.clone(), |acc, term| acc + term)
        }
        Routing::EarlyExit if !out.exit_logits.is_empty() => {
            let n = out.exit_logits.len() as f64;
            out.exit_logits
                .iter()
                .map(|l| cross_entropy(l.clone(), targets.clone(), mask.clone()))
                .reduce(|a, b| a + b)
                .map(|sum| sum.div_scalar(n))
                .unwrap_or_else(|| task.clone())
        }
        Routing::EarlyExit => task.clone(),
        Routing::MixtureOfDepths { .. } => match &out.router_aux {
            Some(aux) => task.clone() + aux.clone().mul_scalar(MOD_AUX_WEIGHT),
            None => task.clone(),
        },
    };
    Objective { total, task }
}
