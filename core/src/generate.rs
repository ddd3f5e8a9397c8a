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
/// KV cache per block (of the context's capacity). When the context fills, the caches are
/// rebuilt from the most recent half of it. `exec` is `Soft` (the training gates without noise), `Hard(scale)` (the
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
    let keep = model.config.context;
    let mut caches = vec![KvCache::new(keep); model.blocks.len()];
    let mut out = Generation::default();
    let (mut active, mut decisions) = (0.0, 0usize);
    // Prefill all but the last prompt token; each step feeds one token and predicts the next.
    let start = history.len().saturating_sub(keep);
    prefill(model, &history[start..history.len() - 1], &mut caches, exec).await?;
    for _ in 0..n {
        if caches[0].len() >= keep {
            caches.iter_mut().for_each(KvCache::clear);
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
        let (logits, p) = step(model, last, &mut caches, exec).await?;
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

/// One sampling step: `token` at the next position; its next-token logits and each router's p.
/// A sparse step reads every p back as it is computed (the host decides whether the token skips
/// the next block); otherwise the logits and every p come back in one read (on a GPU, one
/// synchronisation per token instead of one per router and one more).
async fn step(
    model: &TsaModel,
    token: u32,
    caches: &mut [KvCache],
    exec: Execution,
) -> Result<(Vec<f32>, Vec<f32>)> {
    let (h, halting) = feed(model, &[token], caches, exec, true).await?;
    let logits = model.logits(h).reshape([1, model.config.vocab_size]);
    match halting {
        Halting::Read(p) => Ok((read::floats(logits).await?, p)),
        Halting::OnDevice(p) => {
            let mut all = read::floats(Tensor::cat([vec![logits], p].concat(), 1)).await?;
            let p = all.split_off(model.config.vocab_size);
            Ok((all, p))
        }
    }
}

/// The routers' halting probabilities for the tokens fed, per router.
enum Halting {
    /// Read back as they were computed (a sparse step).
    Read(Vec<f32>),
    /// Still on the device, [1, n] each.
    OnDevice(Vec<Tensor<2>>),
}

/// Feeds `tokens` (at least one) at the next positions through every block, appending to the
/// caches; returns the final state [1, n, d] and the routers' p. With `step` in sparse mode (one
/// token) each p is read back as it is computed and a halted token skips its block but for its
/// K/V; otherwise (soft, masked, or a prefill) sparse runs as masking and nothing is read back.
async fn feed(
    model: &TsaModel,
    tokens: &[u32],
    caches: &mut [KvCache],
    exec: Execution,
    step: bool,
) -> Result<(Tensor<3>, Halting)> {
    debug_assert!(!tokens.is_empty() && (!step || tokens.len() == 1));
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
    let mut read_back = Vec::new();
    for l in 0..model.config.n_routers() {
        let mut gate = model.gate(l, &h, exec, &mut trace);
        if let (true, Some(p)) = (skips, trace.halting.get(l)) {
            let p = read::floats(p.clone()).await?[0];
            read_back.push(p);
            if p as f64 > HALT_THRESHOLD {
                gate = Gate::Skip;
            }
        }
        h = model.blocks[l + 1].forward(h, &gate, Some(&mut caches[l + 1]));
    }
    let halting = match skips {
        true => Halting::Read(read_back),
        false => Halting::OnDevice(trace.halting),
    };
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
