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
    #[error(
        "corpus has {len} characters; it needs about {needed}, so that its validation and test tenths each hold a context window plus one"
    )]
    CorpusTooShort { len: usize, needed: usize },
    #[error("character {ch:?} (U+{code:04X}) is not in the vocabulary")]
    UnknownChar { ch: char, code: u32 },
    #[error("token id {0} is outside the vocabulary")]
    UnknownToken(u32),
    #[error("checkpoint: {0}")]
    Checkpoint(String),
    /// The step's update was not applied: the model is the one before it.
    #[error("loss became {value} at step {step}; that step was not applied")]
    NonFiniteLoss { step: usize, value: f32 },
    #[error("the validation loss is {value}: the model's weights are not finite")]
    NonFiniteEval { value: f32 },
    #[error("reading a tensor from the device failed: {0}")]
    Read(String),
}

pub type Result<T> = std::result::Result<T, TsaError>;
