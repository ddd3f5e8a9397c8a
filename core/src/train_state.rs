//! A run's training state, so that a stopped run continues where it stopped: the model (a whole
//! checkpoint, so every tool that reads checkpoints reads this file too), AdamW's moments, the
//! step, the compute target's multiplier μ, the training config, and whatever the caller keeps
//! besides (JSON: `native-bench` keeps its evaluation curve) — one byte string with a checksum.
//!
//! Layout (`framed.rs`'s envelope): `TSASTATE` | header length (u32 LE) | header JSON |
//! checkpoint length (u64 LE) |
//! checkpoint (`checkpoint.rs`'s format) | optimiser length (u64 LE) | optimiser state (Burn's
//! burnpack record) | CRC-32 of everything before it (u32 LE).
//!
//! Writing reads the optimiser's moments synchronously (Burn's record API), so it needs a device
//! that allows that: any native one, or flex in the browser — not WebGPU in a browser.

use burn::tensor::{Bytes, Device};
use serde::{Deserialize, Serialize};

use crate::checkpoint::{self, CheckpointMeta};
use crate::data::CharTokenizer;
use crate::error::{Result, TsaError};
use crate::framed;
use crate::optim::TrainConfig;
use crate::train::Trainer;

pub const MAGIC: &[u8; 8] = b"TSASTATE";

/// Everything in a training state besides the weights and the optimiser's moments.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StateHeader {
    pub train: TrainConfig,
    /// Optimiser steps completed (also the embedded checkpoint's step).
    pub step: usize,
    /// The compute target's multiplier μ.
    pub mu: f64,
    /// The caller's own progress, stored and returned as it is.
    pub extra: serde_json::Value,
}

fn bad(msg: impl Into<String>) -> TsaError {
    TsaError::Checkpoint(format!("training state: {}", msg.into()))
}

/// Serialises `trainer` (model, optimiser, step, μ, config) with `vocab` and the caller's `extra`.
pub async fn to_bytes(
    trainer: &Trainer,
    vocab: Option<CharTokenizer>,
    extra: serde_json::Value,
) -> Result<Vec<u8>> {
    let meta = CheckpointMeta {
        config: trainer.model.config.clone(),
        vocab,
        step: trainer.step,
    };
    let model = checkpoint::to_bytes(&trainer.model, &meta).await?;
    let optim = trainer
        .optim
        .into_bytes()
        .map_err(|e| bad(format!("optimiser state: {e}")))?;
    let header = StateHeader {
        train: trainer.config.clone(),
        step: trainer.step,
        mu: trainer.mu,
        extra,
    };
    let header = serde_json::to_vec(&header).map_err(|e| bad(e.to_string()))?;
    Ok(framed::write(MAGIC, &header, &[&model, &optim]))
}

/// Whether `bytes` claim to be a training state (its magic bytes).
pub fn is_state(bytes: &[u8]) -> bool {
    bytes.starts_with(MAGIC)
}

/// The parts of a training state: header, checkpoint bytes, optimiser bytes. Any corruption
/// (checksum, lengths) is an error.
fn parts(bytes: &[u8]) -> Result<[&[u8]; 3]> {
    framed::read(
        bytes,
        MAGIC,
        "training state",
        ["header", "checkpoint", "optimiser state"],
    )
    .map_err(bad)
}

/// The checkpoint inside a training state (what `checkpoint::from_bytes` reads from one).
pub fn checkpoint_bytes(bytes: &[u8]) -> Result<&[u8]> {
    parts(bytes).map(|[_, model, _]| model)
}

/// A restored run: its trainer (model, optimiser, step, μ, config) and what the caller stored.
pub struct Resumed {
    pub trainer: Trainer,
    pub meta: CheckpointMeta,
    pub extra: serde_json::Value,
}

/// Rebuilds the trainer on `device` (autodiff is added if missing). The optimiser's moments are
/// read onto Burn's default device (Burn's record API takes none; `BURN_DEVICE` chooses it, and
/// native-bench sets flex; otherwise wgpu where it is compiled in, which then needs an adapter)
/// and move to the parameters' device at the next step. The device's random stream
/// (dropout, Gumbel noise) is reseeded from the config's seed and the step: a resumed run draws
/// the same *kind* of noise as an uninterrupted one, not the same values; without such noise
/// it continues exactly as the uninterrupted run would (tested).
pub fn from_bytes(bytes: &[u8], device: &Device) -> Result<Resumed> {
    let [header, model, optim] = parts(bytes)?;
    let header: StateHeader =
        serde_json::from_slice(header).map_err(|e| bad(format!("header unreadable: {e}")))?;
    let device = if device.is_autodiff() {
        device.clone()
    } else {
        device.clone().autodiff()
    };
    let (model, meta) = checkpoint::from_bytes(model, &device)?;
    if meta.step != header.step {
        return Err(bad(format!(
            "the model is at step {} but the optimiser at step {}",
            meta.step, header.step
        )));
    }
    header.train.validate_for(&meta.config.routing)?;
    if header.step > header.train.steps {
        return Err(bad(format!(
            "step {} is past the run's {} steps",
            header.step, header.train.steps
        )));
    }
    let mut trainer = Trainer::from_model(model, header.train, header.step);
    trainer.mu = header.mu;
    trainer.optim = crate::optim::adamw(&trainer.model, &trainer.config)
        .from_bytes(Bytes::from_bytes_vec(optim.to_vec()))
        .map_err(|e| bad(format!("optimiser state unreadable: {e}")))?;
    device.seed(resume_seed(trainer.config.seed, header.step));
    Ok(Resumed {
        trainer,
        meta,
        extra: header.extra,
    })
}

/// The device seed of a run resumed at `step` (distinct per step, so a run stopped and
/// resumed twice does not repeat its noise).
fn resume_seed(seed: u64, step: usize) -> u64 {
    seed ^ (step as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}
