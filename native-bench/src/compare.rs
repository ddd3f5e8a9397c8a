//! `compare LOG…`: training runs side by side, from the JSON logs `train --log` writes — each
//! run's last evaluation as a table (soft and executed loss, soft and executed α), the first run
//! as the reference, and the curves as SVG. What one needs after trying gates, targets or seeds.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use clap::Args;
use serde::Serialize;

use tsa_core::metrics;

use crate::report::{self, Series};
use crate::train::EvalPoint;

#[derive(Args, Debug, Clone)]
pub struct CompareArgs {
    /// Training logs (`train --log`: one JSON line per evaluation). Each run is named by its
    /// file's name without the extension; the first is the reference of the "vs" column.
    #[arg(required = true, num_args = 1..)]
    pub logs: Vec<PathBuf>,
    /// Folder for compare.{md,json} and the plots compare-loss.svg and compare-alpha.svg.
    #[arg(long, default_value = "results")]
    pub out: PathBuf,
}

/// One run: its name and its evaluations in the order logged.
pub struct Run {
    pub name: String,
    pub curve: Vec<EvalPoint>,
}

/// A run's last evaluation, as the table shows it.
#[derive(Debug, Serialize)]
pub struct Row {
    pub run: String,
    pub step: usize,
    pub val_loss: f64,
    /// With the inference rule executed (p > 0.5 skips); the soft loss where nothing routes.
    pub executed_val_loss: f64,
    pub alpha: f64,
    pub executed_alpha: f64,
    pub executed_tlops_saved: f64,
    /// `metrics::blocks_run` at the executed α: what compares runs of different depths (None
    /// where the log predates its `layers` field).
    pub blocks_per_token: Option<f64>,
    /// Executed loss relative to the first run's (0.01 = 1% worse).
    pub vs_reference: f64,
}

/// Reads a training log. A line that is not an evaluation is an error naming the file and line
/// (a log cut mid-line by a crash included); blank lines are skipped.
pub fn read_log(path: &Path) -> Result<Run> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read {} as a UTF-8 training log", path.display()))?;
    let mut curve = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let point: EvalPoint = serde_json::from_str(line).with_context(|| {
            format!(
                "{} line {}: not an evaluation of a training log",
                path.display(),
                i + 1
            )
        })?;
        curve.push(point);
    }
    if curve.is_empty() {
        bail!("{}: no evaluations (is it a training log?)", path.display());
    }
    let name = path.file_stem().map_or_else(
        || path.display().to_string(),
        |s| s.to_string_lossy().into_owned(),
    );
    Ok(Run { name, curve })
}

fn executed_loss(p: &EvalPoint) -> f64 {
    p.hard_val_loss.unwrap_or(p.val_loss)
}

/// Each run's last evaluation against the first run's.
pub fn rows(runs: &[Run]) -> Vec<Row> {
    let last = |r: &Run| {
        r.curve
            .last()
            .cloned()
            .expect("read_log refuses empty logs")
    };
    let reference = runs.first().map(|r| executed_loss(&last(r)));
    runs.iter()
        .map(|r| {
            let p = last(r);
            let executed = executed_loss(&p);
            Row {
                run: r.name.clone(),
                step: p.step,
                val_loss: p.val_loss,
                executed_val_loss: executed,
                alpha: p.alpha,
                executed_alpha: p.executed_alpha,
                executed_tlops_saved: p.executed_tlops_saved,
                blocks_per_token: (p.layers > 0)
                    .then(|| metrics::blocks_run(p.executed_alpha, p.layers)),
                vs_reference: reference.map_or(0.0, |r0| executed / r0 - 1.0),
            }
        })
        .collect()
}

pub fn markdown(rows: &[Row]) -> String {
    let cells = rows
        .iter()
        .map(|r| {
            vec![
                r.run.clone(),
                r.step.to_string(),
                format!("{:.4}", r.val_loss),
                format!("**{:.4}**", r.executed_val_loss),
                format!("{:.3}", r.alpha),
                format!("**{:.3}**", r.executed_alpha),
                format!("{:.1}%", 100.0 * r.executed_tlops_saved),
                r.blocks_per_token
                    .map_or("—".to_string(), |b| format!("{b:.2}")),
                format!("{:+.2}%", 100.0 * r.vs_reference),
            ]
        })
        .collect::<Vec<_>>();
    report::markdown(
        &[
            "run",
            "step",
            "val loss (soft)",
            "val loss (executed)",
            "soft α",
            "executed α",
            "TLOps saved (executed)",
            "blocks run per token",
            "vs first (executed loss)",
        ],
        &cells,
    )
}

fn series(runs: &[Run], y: impl Fn(&EvalPoint) -> f64) -> Vec<Series> {
    runs.iter()
        .map(|r| Series {
            name: r.name.clone(),
            points: r.curve.iter().map(|p| (p.step as f64, y(p))).collect(),
        })
        .collect()
}

pub fn main(args: &CompareArgs) -> Result<()> {
    let mut runs = args
        .logs
        .iter()
        .map(|p| read_log(p))
        .collect::<Result<Vec<_>>>()?;
    // Logs of the same name from different folders (every run's default is train-log.jsonl)
    // are told apart by their folder.
    for (run, path) in runs.iter_mut().zip(&args.logs) {
        if args
            .logs
            .iter()
            .filter(|p| p.file_stem() == path.file_stem())
            .count()
            > 1
        {
            run.name = path.with_extension("").display().to_string();
        }
    }
    let rows = rows(&runs);
    let md = markdown(&rows);
    let dir = report::results_dir(&args.out)?;
    report::write(&dir.join("compare.md"), &md)?;
    report::write(
        &dir.join("compare.json"),
        &serde_json::to_string_pretty(&rows)?,
    )?;
    report::line_chart(
        &dir.join("compare-loss.svg"),
        "validation loss, inference rule executed",
        "step",
        "validation loss",
        &series(&runs, executed_loss),
    )?;
    report::line_chart(
        &dir.join("compare-alpha.svg"),
        "executed α (share of routed token-layers that run)",
        "step",
        "executed α",
        &series(&runs, |p| p.executed_alpha),
    )?;
    println!(
        "{md}\nsaved {}/compare.{{md,json}}, compare-loss.svg and compare-alpha.svg",
        dir.display()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(step: usize, val: f64, hard: Option<f64>, executed_alpha: f64) -> EvalPoint {
        EvalPoint {
            step,
            train_loss: val as f32,
            val_loss: val,
            bpc: val / std::f64::consts::LN_2,
            alpha: 0.4,
            tlops_saved: 0.5,
            executed_alpha,
            executed_tlops_saved: (1.0 - executed_alpha) * 5.0 / 6.0,
            hard_val_loss: hard,
            accuracy: 0.3,
            tokens_per_s: 1000.0,
            mu: 0.0,
            p_histogram: vec![vec![0.1; 10]; 5],
            layers: 6,
        }
    }

    fn log(dir: &Path, name: &str, points: &[EvalPoint]) -> PathBuf {
        let path = dir.join(format!("{name}.jsonl"));
        std::fs::write(&path, report::json_lines(points).expect("JSON")).expect("write log");
        path
    }

    fn scratch(test: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("tsa-compare-{}-{test}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("scratch dir");
        dir
    }

    #[test]
    fn compares_last_evaluations_against_the_first_run() {
        let dir = scratch("rows");
        let dense = log(
            &dir,
            "dense",
            &[point(100, 2.5, None, 1.0), point(200, 2.0, None, 1.0)],
        );
        let routed = log(
            &dir,
            "routed",
            &[
                point(100, 2.6, Some(2.7), 0.6),
                point(200, 2.1, Some(2.2), 0.5),
            ],
        );
        let args = CompareArgs {
            logs: vec![dense, routed],
            out: dir.join("out"),
        };
        main(&args).expect("compare runs");
        let json: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(dir.join("out/compare.json")).expect("compare.json"),
        )
        .expect("JSON");
        let rows = json.as_array().expect("rows");
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0]["run"], "dense");
        // Dense has no routers: its executed loss is its soft loss.
        assert_eq!(rows[0]["executed_val_loss"], 2.0);
        assert_eq!(rows[1]["step"], 200);
        assert_eq!(rows[1]["executed_val_loss"], 2.2);
        assert_eq!(rows[1]["executed_alpha"], 0.5);
        let vs = rows[1]["vs_reference"].as_f64().expect("vs");
        assert!((vs - 0.1).abs() < 1e-12, "{vs}");
        let md = std::fs::read_to_string(dir.join("out/compare.md")).expect("compare.md");
        assert!(
            md.contains("| routed | 200 | 2.1000 | **2.2000** | 0.400 | **0.500** |"),
            "{md}"
        );
        assert!(md.contains("| 41.7% | 3.50 | +10.00% |"), "{md}");
        for svg in ["compare-loss.svg", "compare-alpha.svg"] {
            let text = std::fs::read_to_string(dir.join("out").join(svg)).expect("plot");
            assert!(text.contains("<svg") && text.contains("routed"), "{svg}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn logs_of_one_name_are_told_apart_by_their_folder() {
        let dir = scratch("stems");
        for sub in ["a", "b"] {
            std::fs::create_dir_all(dir.join(sub)).expect("folder");
            log(&dir.join(sub), "train-log", &[point(100, 2.0, None, 1.0)]);
        }
        let args = CompareArgs {
            logs: vec![dir.join("a/train-log.jsonl"), dir.join("b/train-log.jsonl")],
            out: dir.join("out"),
        };
        main(&args).expect("compare runs");
        let md = std::fs::read_to_string(dir.join("out/compare.md")).expect("compare.md");
        assert!(
            md.contains("a/train-log |") && md.contains("b/train-log |"),
            "{md}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn reads_logs_of_older_versions() {
        let dir = scratch("old");
        // A line as logs were written before μ, the histogram and L were recorded.
        let mut line = serde_json::to_value(point(300, 1.9, Some(1.95), 0.5)).expect("JSON");
        let fields = line.as_object_mut().expect("object");
        for key in ["mu", "p_histogram", "layers"] {
            fields.remove(key);
        }
        let path = dir.join("old.jsonl");
        std::fs::write(&path, format!("{line}\n")).expect("write");
        let rows = rows(&[read_log(&path).expect("an older log reads")]);
        assert_eq!(rows[0].executed_val_loss, 1.95);
        assert_eq!(rows[0].blocks_per_token, None);
        assert!(markdown(&rows).contains("| — |"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn refuses_what_is_not_a_training_log() {
        let dir = scratch("bad");
        let good = report::json_lines(&[point(100, 2.5, None, 1.0)]).expect("JSON");
        // A log cut mid-line (a crash while writing): the error names the file and line.
        let cut = dir.join("cut.jsonl");
        std::fs::write(&cut, format!("{good}{}", &good[..good.len() / 2])).expect("write");
        let e = format!("{:#}", read_log(&cut).err().expect("refused"));
        assert!(e.contains("cut.jsonl line 2"), "{e}");
        let empty = dir.join("empty.jsonl");
        std::fs::write(&empty, "\n").expect("write");
        let e = format!("{:#}", read_log(&empty).err().expect("refused"));
        assert!(e.contains("no evaluations"), "{e}");
        let binary = dir.join("model.tsa");
        std::fs::write(&binary, [0xff, 0xfe, 0x00, 0x01]).expect("write");
        let e = format!("{:#}", read_log(&binary).err().expect("refused"));
        assert!(e.contains("UTF-8"), "{e}");
        let e = format!(
            "{:#}",
            read_log(&dir.join("missing.jsonl")).err().expect("refused")
        );
        assert!(e.contains("cannot read"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
