//! Command-line pieces more than one subcommand takes: the model's shape flags and a checkpoint.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use burn::tensor::Device;
use clap::Args;
use tsa_core::checkpoint::{self, CheckpointMeta};
use tsa_core::{TsaConfig, TsaModel};

/// The transformer's shape: each flag given replaces the recipe's (the paper's LM shape where
/// there is no recipe).
#[derive(Args, Debug, Clone, PartialEq, Default)]
pub struct ShapeArgs {
    #[arg(long)]
    pub d_model: Option<usize>,
    #[arg(long)]
    pub layers: Option<usize>,
    #[arg(long)]
    pub heads: Option<usize>,
    #[arg(long)]
    pub d_ff: Option<usize>,
}

impl ShapeArgs {
    pub fn apply(&self, mut config: TsaConfig) -> TsaConfig {
        config.d_model = self.d_model.unwrap_or(config.d_model);
        config.n_layers = self.layers.unwrap_or(config.n_layers);
        config.n_heads = self.heads.unwrap_or(config.n_heads);
        config.d_ff = self.d_ff.unwrap_or(config.d_ff);
        config
    }
}

/// The corpus: the flag, else $TSA_CORPUS, else data/tinyshakespeare.txt (where scripts/setup.sh
/// puts Tiny-Shakespeare).
pub fn corpus_path(flag: Option<&PathBuf>) -> PathBuf {
    flag.cloned()
        .or_else(|| std::env::var_os("TSA_CORPUS").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("data/tinyshakespeare.txt"))
}

/// Reads a checkpoint written by `train` (or the web app); the error names the file.
pub fn load_checkpoint(path: &Path, device: &Device) -> Result<(TsaModel, CheckpointMeta)> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    checkpoint::from_bytes(&bytes, device).with_context(|| format!("{}", path.display()))
}
