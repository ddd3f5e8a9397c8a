//! `eval --checkpoint F`: validation loss and BPC of a trained model under every way it can run —
//! soft (as trained), the inference rule executed (hard masks; sparse inference computes the
//! same), each `KeepScale`, and early exit at its thresholds — with the soft and the *executed*
//! α side by side, and the histogram of p per router.

use std::path::PathBuf;

use anyhow::{Result, bail};
use clap::Args;
use serde::Serialize;
use tsa_core::read::block_on;
use tsa_core::{EvalStats, Execution, KeepScale, Routing, evaluate};

use crate::args::load_checkpoint;
use crate::device::{self, DeviceChoice};
use crate::report;

#[derive(Args, Debug, Clone)]
pub struct EvalArgs {
    #[arg(long)]
    pub checkpoint: PathBuf,
    /// The corpus the model was trained on (default: $TSA_CORPUS or data/tinyshakespeare.txt).
    #[arg(long)]
    pub corpus: Option<PathBuf>,
    /// Validation batches (seeded windows of the validation split).
    #[arg(long, default_value_t = 20)]
    pub batches: usize,
    #[arg(long, default_value_t = 64)]
    pub batch: usize,
    /// Early exit: the confidence thresholds to evaluate (each in [0, 1]; other checkpoints
    /// have none).
    #[arg(long, value_delimiter = ',', default_values_t = [0.5, 0.8, 0.9, 0.95, 0.99],
          value_parser = crate::args::unit_interval)]
    pub threshold: Vec<f64>,
    #[arg(long, value_enum, default_value = "auto")]
    pub device: DeviceChoice,
    /// Also write the rows as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

#[derive(Debug, Serialize)]
struct Row {
    execution: String,
    #[serde(flatten)]
    stats: EvalStats,
}

pub fn main(args: &EvalArgs) -> Result<()> {
    if args.batches == 0 || args.batch == 0 {
        bail!("--batches and --batch must be at least 1");
    }
    let path = crate::args::corpus_path(args.corpus.as_ref());
    if let Some(json) = &args.json {
        crate::args::check_outputs(
            &[("checkpoint", &args.checkpoint), ("corpus", &path)],
            &[("--json", json)],
        )?;
    }
    let chosen = device::choose(args.device)?;
    eprintln!("device: {}", chosen.name);
    let (model, meta) = load_checkpoint(&args.checkpoint, &chosen.device)?;
    let Some(tok) = meta.vocab else {
        bail!(
            "{} has no character vocabulary (a synthetic-task model): eval takes a language model",
            args.checkpoint.display()
        )
    };
    let ctx = model.config.context;
    let corpus = crate::args::corpus_for(args.corpus.as_ref(), tok, ctx)?;
    let batches = corpus.eval_batches(args.batches, args.batch, ctx, &chosen.device);

    let routing = model.config.routing;
    let mut runs: Vec<(String, Execution)> = vec![("soft (as trained)".into(), Execution::Soft)];
    match routing {
        Routing::Tsa { .. } | Routing::MixtureOfDepths { .. } => {
            let trained = routing.keep_scale();
            for scale in [KeepScale::OneMinusP, KeepScale::One] {
                let note = if scale == trained {
                    ", trained scale"
                } else {
                    ""
                };
                runs.push((
                    format!("executed, kept × {scale:?}{note}"),
                    Execution::Hard(scale),
                ));
            }
            runs.push((
                format!("sparse (gather/scatter), kept × {trained:?}"),
                Execution::Sparse(trained),
            ));
        }
        Routing::EarlyExit => {
            for &threshold in &args.threshold {
                runs.push((
                    format!("early exit, threshold {threshold}"),
                    Execution::Exit { threshold },
                ));
            }
        }
        Routing::Dense => {}
    }
    let mut rows = Vec::new();
    for (name, exec) in runs {
        let stats = block_on(evaluate(&model, &batches, exec))?;
        rows.push(Row {
            execution: name,
            stats,
        });
    }
    let table: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let s = &r.stats;
            vec![
                r.execution.clone(),
                format!("{:.4}", s.loss),
                format!("{:.4}", s.bpc),
                format!("{:.3}", s.alpha),
                format!("{:.3}", s.executed_alpha),
                format!("{:.1}%", 100.0 * s.executed_tlops_saved),
            ]
        })
        .collect();
    println!(
        "{} ({} steps), {} × {} validation tokens\n\n{}",
        routing.label(),
        meta.step,
        args.batches * args.batch,
        ctx,
        report::markdown(
            &[
                "execution",
                "val loss",
                "BPC",
                "α as gated",
                "executed α",
                "executed TLOps saved"
            ],
            &table
        )
    );
    if let Some(hist) = rows
        .first()
        .map(|r| &r.stats.p_histogram)
        .filter(|h| !h.is_empty())
    {
        println!(
            "\nHalting probability p per router (share of tokens per tenth of [0, 1]; p > 0.5 halts):\n"
        );
        let header: Vec<String> = std::iter::once("router".to_string())
            .chain((0..10).map(|k| format!("{:.1}–{:.1}", k as f64 / 10.0, (k + 1) as f64 / 10.0)))
            .collect();
        let header: Vec<&str> = header.iter().map(String::as_str).collect();
        let body: Vec<Vec<String>> = hist
            .iter()
            .enumerate()
            .map(|(l, bins)| {
                std::iter::once(format!("r{l}"))
                    .chain(bins.iter().map(|b| format!("{:.3}", b)))
                    .collect()
            })
            .collect();
        println!("{}", report::markdown(&header, &body));
    }
    if let Some(out) = &args.json {
        crate::resume::write_atomically(out, serde_json::to_string_pretty(&rows)?.as_bytes())?;
    }
    Ok(())
}
