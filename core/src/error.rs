//! Errors a user can cause: bad configs, corpora, checkpoints, and a diverging loss.

use thiserror::Error;

#[derive(Debug, Error)]
pub enum TsaError {
    #[error("invalid config: {0}")]
    InvalidConfig(String),
    #[error("corpus is empty")]
    EmptyCorpus,
    #[error("corpus is not valid UTF-8 (first bad byte at offset {offset})")]
    NotUtf8 { offset: usize },
    #[error("corpus has {len} characters, fewer than one context window plus one ({needed})")]
    CorpusTooShort { len: usize, needed: usize },
    #[error("character {ch:?} (U+{code:04X}) is not in the vocabulary")]
    UnknownChar { ch: char, code: u32 },
    #[error("token id {0} is outside the vocabulary")]
    UnknownToken(u32),
    #[error("checkpoint: {0}")]
    Checkpoint(String),
    #[error(
        "loss became {value} at step {step}; training stopped and the last good model was kept"
    )]
    NonFiniteLoss { step: usize, value: f32 },
    #[error("reading a tensor from the device failed: {0}")]
    Read(String),
}

pub type Result<T> = std::result::Result<T, TsaError>;
