//! Autoregressive generation with a KV cache, one token at a time, soft or sparse: the sampling
//! loop; the gates are the forward pass's (`TsaModel::gate`), the blocks the same blocks.
//!
//! In sparse mode a token whose router says p_l > 0.5 only computes its keys and values at block
//! l+1 (later tokens attend to them) and skips the rest of the block: at batch 1 that is real
//! skipped work with no gather/scatter at all.
//!
//! The prompt, and the recent half of the context each time the context fills, go through the
//! blocks in one forward pass (a prefill) rather than one token at a time: a [n, d] matrix
//! product instead of n vector products, and no host read per token. A halted token's update is
//! masked there (the same values as skipping it: its state unchanged, its K/V cached).

use burn::tensor::{Int, Tensor, TensorData};
use rand::RngExt;
use rand::rngs::StdRng;

use crate::attention::KvCache;
use crate::error::{Result, TsaError};
use crate::gate::Gate;
use crate::model::{Execution, Trace, TsaModel};
use crate::read;
use crate::routing::HALT_THRESHOLD;

/// A generated continuation and what the routers did at each generated token.
#[derive(Debug, Clone, Default)]
pub struct Generation {
    pub tokens: Vec<u32>,
    /// Per generated token, p_l at each router (empty without routers).
    pub halting: Vec<Vec<f32>>,
    /// Share of routed block updates that ran (1 − p soft; the executed share when sparse).
    pub alpha: f64,
}

/// Appends `n` sampled tokens to `prompt` (temperature 0: greedy), one token at a time with a
/// KV cache per block. When the context fills, the caches are rebuilt from the most recent
/// half of it. `exec` is `Soft` (the training gates without noise), `Hard(scale)` (the
/// inference rule by masking) or `Sparse(scale)` (the same rule, a halted token only
/// computes its K/V: real skipped work at batch 1); other executions are refused.
pub async fn generate(
    model: &TsaModel,
    prompt: &[u32],
    n: usize,
    temperature: f64,
    exec: Execution,
    rng: &mut StdRng,
) -> Result<Generation> {
    if prompt.is_empty() {
        return Err(TsaError::InvalidConfig(
            "generation needs a prompt of at least one token".into(),
        ));
    }
    if let Some(&bad) = prompt
        .iter()
        .find(|&&t| t as usize >= model.config.vocab_size)
    {
        return Err(TsaError::UnknownToken(bad));
    }
    match exec {
        Execution::Soft | Execution::Hard(_) | Execution::Sparse(_) => {}
        other => {
            return Err(TsaError::InvalidConfig(format!(
                "generation runs Soft, Hard or Sparse, not {other:?}"
            )));
        }
    }
    let mut history: Vec<u32> = prompt.to_vec();
    let mut caches = vec![KvCache::default(); model.blocks.len()];
    let mut out = Generation::default();
    let (mut active, mut decisions) = (0.0, 0usize);
    // Prefill all but the last prompt token; each step feeds one token and predicts the next.
    let keep = model.config.context;
    let start = history.len().saturating_sub(keep);
    prefill(model, &history[start..history.len() - 1], &mut caches, exec).await?;
    for _ in 0..n {
        if caches[0].len() >= keep {
            caches = vec![KvCache::default(); model.blocks.len()];
            let recent = history.len().saturating_sub(keep / 2);
            prefill(
                model,
                &history[recent..history.len() - 1],
                &mut caches,
                exec,
            )
            .await?;
        }
        let last = history[history.len() - 1];
        let (h, p) = feed(model, &[last], &mut caches, exec, true).await?;
        let logits = read::floats(model.logits(h)).await?;
        let next = sample(&logits, temperature, rng);
        for &pl in &p {
            active += match exec {
                Execution::Soft => 1.0 - pl as f64,
                _ => f64::from(u8::from(pl as f64 <= HALT_THRESHOLD)),
            };
            decisions += 1;
        }
        out.halting.push(p);
        out.tokens.push(next);
        history.push(next);
    }
    out.alpha = if decisions == 0 {
        1.0
    } else {
        active / decisions as f64
    };
    Ok(out)
}

/// The prompt, or the recent half of the context after a roll-over, in one pass (none: nothing).
async fn prefill(
    model: &TsaModel,
    tokens: &[u32],
    caches: &mut [KvCache],
    exec: Execution,
) -> Result<()> {
    if !tokens.is_empty() {
        feed(model, tokens, caches, exec, false).await?;
    }
    Ok(())
}

/// Feeds `tokens` (at least one) at the next positions through every block, appending to the caches; returns
/// the final state [1, n, d]. With `step` (one token, the sampling step) each router's p is read
/// back as it is computed and returned, and in sparse mode a halted token then skips its block
/// but for its K/V. Without (a prefill), nothing is read back and sparse runs as masking.
async fn feed(
    model: &TsaModel,
    tokens: &[u32],
    caches: &mut [KvCache],
    exec: Execution,
    step: bool,
) -> Result<(Tensor<3>, Vec<f32>)> {
    debug_assert!(!tokens.is_empty() && (!step || tokens.len() == 1));
    let mut halting = Vec::new();
    let ids = tokens.iter().map(|&t| t as i32).collect::<Vec<_>>();
    let x = Tensor::<2, Int>::from_data(TensorData::new(ids, [1, tokens.len()]), &model.device());
    let pos = caches[0].len();
    let mut h = model.blocks[0].forward(model.embed(x, pos), &Gate::Open, Some(&mut caches[0]));
    let skips = step && matches!(exec, Execution::Sparse(_));
    let exec = match exec {
        Execution::Sparse(scale) => Execution::Hard(scale),
        other => other,
    };
    let mut trace = Trace::new(model.config.routing, exec);
    for l in 0..model.config.n_routers() {
        let mut gate = model.gate(l, &h, exec, &mut trace);
        if let (true, Some(p)) = (step, trace.halting.get(l)) {
            let p = read::floats(p.clone()).await?[0];
            halting.push(p);
            if skips && p as f64 > HALT_THRESHOLD {
                gate = Gate::Skip;
            }
        }
        h = model.blocks[l + 1].forward(h, &gate, Some(&mut caches[l + 1]));
    }
    Ok((h, halting))
}

fn sample(logits: &[f32], temperature: f64, rng: &mut StdRng) -> u32 {
    let argmax = || {
        logits
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.total_cmp(b.1))
            .map_or(0, |(i, _)| i as u32)
    };
    if temperature <= 0.0 {
        return argmax();
    }
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let weights: Vec<f64> = logits
        .iter()
        .map(|&l| ((l as f64 - max) / temperature).exp())
        .collect();
    let total: f64 = weights.iter().sum();
    let mut u = rng.random_range(0.0..total);
    for (i, w) in weights.iter().enumerate() {
        if u < *w {
            return i as u32;
        }
        u -= w;
    }
    argmax()
}
