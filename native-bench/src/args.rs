//! Command-line pieces more than one subcommand takes: the model's shape flags and a checkpoint.

use std::path::Path;

use anyhow::{Context, Result};
use burn::tensor::Device;
use clap::Args;
use tsa_core::checkpoint::{self, CheckpointMeta};
use tsa_core::{TsaConfig, TsaModel};

/// The transformer's shape; the paper's LM shape by default.
#[derive(Args, Debug, Clone, PartialEq)]
pub struct ShapeArgs {
    #[arg(long, default_value_t = 256)]
    pub d_model: usize,
    #[arg(long, default_value_t = 6)]
    pub layers: usize,
    #[arg(long, default_value_t = 8)]
    pub heads: usize,
    #[arg(long, default_value_t = 1024)]
    pub d_ff: usize,
}

impl ShapeArgs {
    pub fn apply(&self, config: TsaConfig) -> TsaConfig {
        config
            .with_d_model(self.d_model)
            .with_n_layers(self.layers)
            .with_n_heads(self.heads)
            .with_d_ff(self.d_ff)
    }
}

/// Reads a checkpoint written by `train` (or the web app); the error names the file.
pub fn load_checkpoint(path: &Path, device: &Device) -> Result<(TsaModel, CheckpointMeta)> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    checkpoint::from_bytes(&bytes, device).with_context(|| format!("{}", path.display()))
}
