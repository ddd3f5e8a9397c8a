//! `export` and `import`: a checkpoint to safetensors in PyTorch's layout (for PyTorch and Hugging
//! Face tooling) and back (tsa_core::export).

use std::path::PathBuf;

use anyhow::{Context, Result};
use burn::tensor::Device;
use clap::Args;
use tsa_core::checkpoint;
use tsa_core::export;
use tsa_core::read::block_on;

use crate::args::{check_outputs, load_checkpoint};
use crate::resume::write_atomically;

#[derive(Args, Debug, Clone)]
pub struct ExportArgs {
    /// A checkpoint written by `train` or the web app.
    #[arg(long)]
    pub checkpoint: PathBuf,
    #[arg(long, default_value = "results/model.safetensors")]
    pub out: PathBuf,
}

#[derive(Args, Debug, Clone)]
pub struct ImportArgs {
    /// A safetensors file written by `export` (or by the PyTorch twin in tests/parity).
    #[arg(long)]
    pub safetensors: PathBuf,
    /// The checkpoint to write (loadable by the web app and every subcommand).
    #[arg(long, default_value = "results/model.tsa")]
    pub out: PathBuf,
}

pub fn export(args: &ExportArgs) -> Result<()> {
    check_outputs(&[("checkpoint", &args.checkpoint)], &[("--out", &args.out)])?;
    let (model, meta) = load_checkpoint(&args.checkpoint, &Device::flex())?;
    let bytes = export::to_safetensors(&model, &meta)?;
    write_atomically(&args.out, &bytes)?;
    println!(
        "{} ({} parameters) → {}",
        meta.config.routing.label(),
        burn::module::Module::num_params(&model),
        args.out.display()
    );
    Ok(())
}

pub fn import(args: &ImportArgs) -> Result<()> {
    check_outputs(
        &[("safetensors file", &args.safetensors)],
        &[("--out", &args.out)],
    )?;
    let bytes = std::fs::read(&args.safetensors)
        .with_context(|| format!("cannot read {}", args.safetensors.display()))?;
    let (model, meta) = export::from_safetensors(&bytes, &Device::flex())
        .with_context(|| format!("{}", args.safetensors.display()))?;
    write_atomically(&args.out, &block_on(checkpoint::to_bytes(&model, &meta))?)?;
    println!("{} → {}", meta.config.routing.label(), args.out.display());
    Ok(())
}
