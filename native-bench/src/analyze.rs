//! `analyze --checkpoint F`: how much compute each kind of character gets at each router, and
//! how (1 − p) correlates with the token's loss — the analysis the paper leaves to future work.

use std::path::PathBuf;

use anyhow::{Result, bail};
use burn::tensor::activation::log_softmax;
use clap::Args;
use serde::Serialize;
use tsa_core::Execution;
use tsa_core::char_class::{CLASSES, class};
use tsa_core::data::{Batch, Split};
use tsa_core::read::block_on;

use crate::args::load_checkpoint;
use crate::device::{self, DeviceChoice};
use crate::report::{self, Series};

#[derive(Args, Debug, Clone)]
pub struct AnalyzeArgs {
    #[arg(long)]
    pub checkpoint: PathBuf,
    /// The corpus the model was trained on (default: $TSA_CORPUS or data/tinyshakespeare.txt).
    #[arg(long)]
    pub corpus: Option<PathBuf>,
    /// Validation windows to analyse (at least 1).
    #[arg(long, default_value_t = 32, value_parser = crate::args::positive)]
    pub windows: usize,
    #[arg(long, value_enum, default_value = "auto")]
    pub device: DeviceChoice,
    #[arg(long, default_value = "results")]
    pub out: PathBuf,
}

#[derive(Debug, Serialize)]
struct ClassRow {
    class: &'static str,
    count: usize,
    /// Mean (1 − p_l) per router.
    active: Vec<f64>,
    mean_active: f64,
    mean_loss: f64,
}

fn pearson(x: &[f64], y: &[f64]) -> f64 {
    let n = x.len() as f64;
    let (mx, my) = (x.iter().sum::<f64>() / n, y.iter().sum::<f64>() / n);
    let cov: f64 = x.iter().zip(y).map(|(a, b)| (a - mx) * (b - my)).sum();
    let vx: f64 = x.iter().map(|a| (a - mx).powi(2)).sum();
    let vy: f64 = y.iter().map(|b| (b - my).powi(2)).sum();
    cov / (vx * vy).sqrt()
}

pub fn main(args: &AnalyzeArgs) -> Result<()> {
    let dir = report::results_dir(&args.out)?;
    let chosen = device::choose(args.device)?;
    let (model, meta) = load_checkpoint(&args.checkpoint, &chosen.device)?;
    let Some(tok) = meta.vocab else {
        bail!("this checkpoint has no character vocabulary")
    };
    if model.routers.is_empty() {
        bail!("{} has no routers to analyse", model.config.routing.label());
    }
    let ctx = model.config.context;
    let corpus = crate::args::corpus_for(args.corpus.as_ref(), tok.clone(), ctx)?;
    let n_r = model.routers.len();
    let mut sums = vec![(0usize, vec![0.0f64; n_r], 0.0f64); CLASSES.len()];
    let (mut all_active, mut all_loss) = (Vec::new(), Vec::new());
    for (x, y) in corpus.eval_windows(Split::Val, args.windows, 1, ctx, 99) {
        let batch = Batch::new(x.clone(), y, None, ctx, &chosen.device);
        let out = model.forward(batch.inputs.clone(), Execution::Soft);
        let nll = log_softmax(out.logits, 2)
            .gather(2, batch.targets.reshape([1, ctx, 1]))
            .neg();
        let loss: Vec<f32> = block_on(tsa_core::read::floats(nll))?;
        let active: Vec<Vec<f32>> = out
            .active
            .iter()
            .map(|a| block_on(tsa_core::read::floats(a.clone())))
            .collect::<Result<_, _>>()?;
        let chars = tok
            .decode(&x.iter().map(|&i| i as u32).collect::<Vec<_>>())?
            .chars()
            .collect::<Vec<_>>();
        for i in 0..ctx {
            let k = class(i.checked_sub(1).map(|j| chars[j]), chars[i]);
            sums[k].0 += 1;
            let mut mean = 0.0;
            for (sum, a) in sums[k].1.iter_mut().zip(&active) {
                *sum += a[i] as f64;
                mean += a[i] as f64 / n_r as f64;
            }
            sums[k].2 += loss[i] as f64;
            all_active.push(mean);
            all_loss.push(loss[i] as f64);
        }
    }
    let rows: Vec<ClassRow> = sums
        .iter()
        .enumerate()
        .filter(|(_, s)| s.0 > 0)
        .map(|(k, (n, act, loss))| ClassRow {
            class: CLASSES[k],
            count: *n,
            active: act.iter().map(|a| a / *n as f64).collect(),
            mean_active: act.iter().sum::<f64>() / (*n * n_r) as f64,
            mean_loss: loss / *n as f64,
        })
        .collect();
    let r = pearson(&all_active, &all_loss);

    let mut header = vec!["class".to_string(), "count".into()];
    header.extend((0..n_r).map(|l| format!("1−p r{l}")));
    header.extend(["mean 1−p".into(), "mean loss".into()]);
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|c| {
            let mut v = vec![c.class.to_string(), c.count.to_string()];
            v.extend(c.active.iter().map(|a| format!("{a:.3}")));
            v.extend([
                format!("{:.3}", c.mean_active),
                format!("{:.3}", c.mean_loss),
            ]);
            v
        })
        .collect();
    let hdr: Vec<&str> = header.iter().map(|s| s.as_str()).collect();
    let md = format!(
        "# Routing by token class ({}; {} validation characters)\n\n{}\nPearson correlation between a token's mean (1 − p) and its loss: r = {r:.3}\n",
        model.config.routing.label(),
        all_loss.len(),
        report::markdown(&hdr, &cells)
    );
    report::write(&dir.join("analyze.md"), &md)?;
    report::write(
        &dir.join("analyze.json"),
        &serde_json::to_string_pretty(
            &serde_json::json!({ "classes": rows, "pearson_active_loss": r }),
        )?,
    )?;
    let series: Vec<Series> = rows
        .iter()
        .map(|c| Series {
            name: c.class.into(),
            points: c
                .active
                .iter()
                .enumerate()
                .map(|(l, &a)| (l as f64, a))
                .collect(),
        })
        .collect();
    report::line_chart(
        &dir.join("analyze.svg"),
        "1 − p by router and token class",
        "router",
        "mean 1 − p",
        &series,
    )?;
    println!("{md}\nsaved {}/analyze.{{md,json,svg}}", dir.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn characters_fall_into_the_right_class() {
        let text: Vec<char> = "Hi, you\nthere".chars().collect();
        let got: Vec<&str> = (0..text.len())
            .map(|i| CLASSES[class(i.checked_sub(1).map(|j| text[j]), text[i])])
            .collect();
        assert_eq!(
            got,
            [
                "capital",
                "mid-word letter",
                "punctuation",
                "space",
                "word-initial letter",
                "mid-word letter",
                "mid-word letter",
                "newline",
                "word-initial letter",
                "mid-word letter",
                "mid-word letter",
                "mid-word letter",
                "mid-word letter"
            ]
        );
        assert!((pearson(&[1.0, 2.0, 3.0], &[2.0, 4.0, 6.0]) - 1.0).abs() < 1e-12);
    }
}
