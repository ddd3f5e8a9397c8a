//! `cargo run --release -p native-bench`: what sparse-TSA buys in wall-clock time on this machine
//! (paper Table 5), plus training, the paper's tables, routing analysis and sampling.

mod analyze;
mod args;
mod compare;
mod convert;
mod device;
mod eval;
mod report;
mod reproduce;
mod resume;
mod sample;
mod tables;
mod throughput;
mod train;

use std::io::Write;

use anyhow::Result;
use clap::{Parser, Subcommand};

#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser, Debug)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// With no subcommand: the throughput benchmark.
    #[command(flatten)]
    throughput: throughput::ThroughputArgs,
}

// Parsed once per run: the training arguments' size does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand, Debug)]
enum Command {
    /// Forward-pass throughput of dense, soft- and sparse-TSA (the default).
    Throughput(throughput::ThroughputArgs),
    /// Train any routing variant; writes a checkpoint and a JSON log.
    Train(train::TrainArgs),
    /// Re-run one of the paper's tables.
    Reproduce(reproduce::ReproduceArgs),
    /// Validation loss of a checkpoint soft and executed, with soft and executed α.
    Eval(eval::EvalArgs),
    /// A checkpoint as safetensors in PyTorch's layout (config and vocabulary in its metadata).
    Export(convert::ExportArgs),
    /// A safetensors export back into a checkpoint.
    Import(convert::ImportArgs),
    /// Routing by token class and its correlation with loss, from a checkpoint.
    Analyze(analyze::AnalyzeArgs),
    /// Generate text with a KV cache, soft vs sparse, routing in colour.
    Sample(sample::SampleArgs),
    /// Training runs side by side from their logs: soft and executed loss and α, and curves.
    Compare(compare::CompareArgs),
}

/// mimalloc's `mi_option_purge_decommits` (its v3 header's option 5; the binding names no
/// constant for it).
const MI_OPTION_PURGE_DECOMMITS: libmimalloc_sys::mi_option_t = 5;

fn main() {
    // Freed memory that mimalloc purges is decommitted by default, so the next step's buffers
    // fault in zeroed pages again: a third of paper-shape CPU training's time went to the kernel
    // (sys). Purging by reset (MADV_FREE) leaves the pages to the OS to reclaim only under memory
    // pressure: training at the paper's shape 1.1–1.4× faster (docs/RESULTS.md). Set before
    // any large allocation; mimalloc reads the option at each purge.
    // SAFETY: sets a process-wide option; no allocation depends on its value.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DECOMMITS, 0) };
    // What Burn creates without being given a device — the optimiser's moments read back from
    // a training state (`train --resume`) — goes to its default device, a GPU one where wgpu is
    // compiled in. Flex instead: resuming then starts no GPU runtime and needs none, and the
    // moments move to the parameters' device at the next step.
    if std::env::var_os("BURN_DEVICE").is_none() {
        // SAFETY: no other thread exists yet to read the environment concurrently.
        unsafe { std::env::set_var("BURN_DEVICE", "flex") };
    }
    // Rust ignores SIGPIPE, so printing into a closed pipe (`native-bench compare … | head`)
    // panicked with a backtrace; the default action ends the process quietly, as other tools do.
    #[cfg(unix)]
    // SAFETY: restores a signal's default action before any other thread exists.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL)
    };
    let cli = Cli::parse();
    let result: Result<()> = match &cli.command {
        None => throughput::run(&cli.throughput).map(|_| ()),
        Some(Command::Throughput(a)) => throughput::run(a).map(|_| ()),
        Some(Command::Train(a)) => train::main(a),
        Some(Command::Reproduce(a)) => reproduce::main(a),
        Some(Command::Eval(a)) => eval::main(a),
        Some(Command::Export(a)) => convert::export(a),
        Some(Command::Import(a)) => convert::import(a),
        Some(Command::Analyze(a)) => analyze::main(a),
        Some(Command::Sample(a)) => sample::main(a),
        Some(Command::Compare(a)) => compare::main(a),
    };
    if let Err(e) = result {
        if let Some(stop) = e.downcast_ref::<resume::Interrupted>() {
            // Not `eprintln!`: after SIGHUP the terminal may be gone, and a failed write panics.
            let _ = writeln!(std::io::stderr(), "{stop}");
            std::process::exit(130);
        }
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}
