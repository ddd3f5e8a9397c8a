//! Forward-pass throughput of dense, soft-TSA and sparse-TSA (paper Table 5), interleaved.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result};
use burn::module::Param;
use burn::tensor::{Int, Tensor, TensorData};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde::Serialize;
use tsa_core::{Execution, KeepScale, Routing, TsaConfig, TsaModel, metrics};

use crate::args::{ShapeArgs, load_checkpoint};
use crate::device::{self, DeviceChoice};
use crate::report;

#[derive(Args, Debug, Clone)]
pub struct ThroughputArgs {
    #[arg(long, value_enum, default_value = "auto")]
    pub device: DeviceChoice,
    #[command(flatten)]
    pub shape: ShapeArgs,
    #[arg(long, default_value_t = 65)]
    pub vocab: usize,
    /// Batch sizes to sweep.
    #[arg(long, value_delimiter = ',', default_value = "64,8,1")]
    pub batch: Vec<usize>,
    #[arg(long, default_value_t = 256)]
    pub seq: usize,
    /// On a GPU, sparse conditions gather through the host (`argwhere`, Burn's ops) instead of
    /// running tsa-shaders' device kernels: the path before the kernels, for comparison.
    #[arg(long)]
    pub host_gather: bool,
    /// Target active fractions for the calibrated sparse conditions.
    #[arg(long, value_delimiter = ',', default_value = "0.726,0.833,0.5")]
    pub alphas: Vec<f64>,
    #[arg(long, default_value_t = 1)]
    pub warmup: usize,
    /// Timed rounds; each round runs every condition once, in turn.
    #[arg(long, default_value_t = 5)]
    pub runs: usize,
    /// A trained checkpoint to time as well, dense and sparse; its shapes replace the flags.
    #[arg(long)]
    pub checkpoint: Option<PathBuf>,
    /// Print JSON lines instead of the markdown table.
    #[arg(long)]
    pub json: bool,
    #[arg(long, default_value = "results")]
    pub out: PathBuf,
}

#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub condition: String,
    pub device: String,
    pub batch: usize,
    pub seq: usize,
    /// Executed active fraction: the share of routed token-layers this condition computes (1 for
    /// soft-TSA, which runs every block; None for the baseline, which has no routers).
    pub alpha: Option<f64>,
    /// The training-time forward's active fraction (`Execution::Soft`; the soft gate's mean
    /// 1 − p), beside the executed one as everywhere else.
    pub soft_alpha: Option<f64>,
    pub tlops_saved: Option<f64>,
    pub ms_median: f64,
    pub ms_min: f64,
    pub ms_max: f64,
    pub speedup: f64,
}

/// Where a condition's weights come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Weights {
    /// Freshly initialised from one seed, dense and TSA.
    Fresh,
    /// The fresh TSA weights with router biases set for one `--alphas` target (its rows' names
    /// end in it).
    Calibrated,
    /// `--checkpoint`'s.
    Trained,
}

/// How a condition runs its weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Run {
    /// Every block for every token.
    Dense,
    Soft,
    Sparse,
    SparseQueries,
}

/// The table's conditions in the order they are timed; the first is the speedups' baseline.
/// "trained weights, dense" is the fair baseline for trained weights: the same weights, so any
/// value-dependent cost cancels (flex's own GELU ran trained weights 1.5–2.3× slower than fresh
/// ones until `tsa_core::gelu`; docs/RESULTS.md).
#[rustfmt::skip]
const CONDITIONS: [(Weights, Run, &str); 7] = [
    (Weights::Fresh,      Run::Dense,         "baseline (dense)"),
    (Weights::Fresh,      Run::Soft,          "soft-TSA"),
    (Weights::Calibrated, Run::Sparse,        "sparse-TSA α="),
    (Weights::Calibrated, Run::SparseQueries, "sparse-TSA+queries α="),
    (Weights::Trained,    Run::Dense,         "trained weights, dense"),
    (Weights::Trained,    Run::Sparse,        "sparse-TSA (trained)"),
    (Weights::Trained,    Run::SparseQueries, "sparse-TSA+queries (trained)"),
];

struct Condition {
    name: String,
    model: TsaModel,
    exec: Execution,
    times: Vec<f64>,
    alpha: Option<f64>,
    soft_alpha: Option<f64>,
}

impl Condition {
    /// The conditions `CONDITIONS` lists for `weights`, named with `suffix`: `routed` runs soft
    /// or sparse (kept tokens scaled as its routing trained them); a dense row runs `dense`, or
    /// without it `routed` with every block.
    fn of(
        weights: Weights,
        routed: &TsaModel,
        dense: Option<&TsaModel>,
        suffix: &str,
    ) -> Vec<Self> {
        let keep = routed.config.routing.keep_scale();
        let rows = CONDITIONS.iter().filter(|(w, ..)| *w == weights);
        rows.map(|&(_, run, name)| {
            let (model, exec) = match run {
                Run::Dense => {
                    let mut all_blocks = dense.unwrap_or(routed).clone();
                    all_blocks.config.routing = Routing::Dense;
                    (all_blocks, Execution::Soft)
                }
                Run::Soft => (routed.clone(), Execution::Soft),
                Run::Sparse => (routed.clone(), Execution::Sparse(keep)),
                Run::SparseQueries => (routed.clone(), Execution::SparseQueries(keep)),
            };
            Self {
                name: format!("{name}{suffix}"),
                model,
                exec,
                times: vec![],
                alpha: None,
                soft_alpha: None,
            }
        })
        .collect()
    }
}

/// Sets each router's final bias so that exactly a share `alpha` of this batch's tokens is kept
/// (p ≤ 0.5) at every router, in order (router l's input depends on the routers before it).
pub fn calibrate(mut model: TsaModel, tokens: &Tensor<2, Int>, alpha: f64) -> Result<TsaModel> {
    for l in 0..model.routers.len() {
        let out = model.forward(tokens.clone(), Execution::Sparse(KeepScale::OneMinusP));
        let p = read(out.halting[l].clone())?;
        // logit(p) = z + b; keep iff z + b' ≤ 0; choose b' = b − q_α(logit p).
        let mut logits: Vec<f64> = p
            .iter()
            .map(|&p| {
                let p = (p as f64).clamp(1e-7, 1.0 - 1e-7);
                (p / (1.0 - p)).ln()
            })
            .collect();
        logits.sort_by(|a, b| a.total_cmp(b));
        let k = ((alpha * logits.len() as f64).round() as usize).clamp(1, logits.len());
        let cut = if k < logits.len() {
            0.5 * (logits[k - 1] + logits[k])
        } else {
            logits[k - 1] + 1.0
        };
        let bias = model.routers[l]
            .out
            .bias
            .take()
            .context("router without a bias")?;
        let (id, b, _) = bias.consume();
        model.routers[l].out.bias = Some(Param::initialized(id, b.sub_scalar(cut)));
    }
    Ok(model)
}

fn read<const D: usize>(t: Tensor<D>) -> Result<Vec<f32>> {
    Ok(tsa_core::read::block_on(tsa_core::read::floats(t))?)
}

/// A condition's (soft α, executed α). Soft: the active fraction of the training-time forward.
/// Executed: the share of routed token-layers the condition's own forward computes — all of them
/// under `Execution::Soft`, which runs every block for every token and only weights the update.
fn alphas(
    model: &TsaModel,
    tokens: &Tensor<2, Int>,
    exec: Execution,
) -> Result<(Option<f64>, Option<f64>)> {
    let active = |exec: Execution| -> Result<Option<f64>> {
        let out = model.forward(tokens.clone(), exec);
        match metrics::alpha(&out.active) {
            Some(a) => Ok(Some(read(a)?[0] as f64)),
            None => Ok(None),
        }
    };
    let soft = active(Execution::Soft)?;
    let executed = match exec {
        Execution::Soft => soft.map(|_| 1.0),
        _ => active(exec)?,
    };
    Ok((soft, executed))
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        0.5 * (v[n / 2 - 1] + v[n / 2])
    }
}

impl ThroughputArgs {
    /// Refuses flags that cannot be timed (a zero batch reaches flex as an empty tensor, which
    /// it does not survive) before any device or model is set up.
    fn validate(&self) -> Result<()> {
        anyhow::ensure!(
            !self.batch.is_empty() && self.batch.iter().all(|&b| b > 0),
            "--batch: every batch size must be at least 1 (got {:?})",
            self.batch
        );
        anyhow::ensure!(self.seq > 0, "--seq must be at least 1");
        anyhow::ensure!(
            self.runs > 0,
            "--runs must be at least 1 (the median needs a timing)"
        );
        if let Some(a) = self.alphas.iter().find(|a| !(0.0..=1.0).contains(*a)) {
            anyhow::bail!("--alphas: {a} is not an active fraction in [0, 1]");
        }
        Ok(())
    }
}

/// Milliseconds with three significant digits at least one decimal (small shapes time in
/// hundredths of a millisecond).
fn ms(t: f64) -> String {
    match t {
        t if t < 1.0 => format!("{t:.3}"),
        t if t < 10.0 => format!("{t:.2}"),
        t => format!("{t:.1}"),
    }
}

pub fn run(args: &ThroughputArgs) -> Result<Vec<Row>> {
    args.validate()?;
    // Made (or refused) before minutes of timing, not after.
    let dir = report::results_dir(&args.out)?;
    tsa_core::sparse::use_device_kernels(!args.host_gather);
    let chosen = device::choose(args.device)?;
    let device = chosen.device.clone();
    eprintln!("device: {}", chosen.name);

    let trained = match &args.checkpoint {
        Some(path) => Some(load_checkpoint(path, &device)?.0),
        None => None,
    };
    let shape = match &trained {
        Some(m) => m.config.clone(),
        None => args
            .shape
            .apply(TsaConfig::new(args.vocab))
            .with_context(args.seq),
    };
    let seq = args.seq.min(shape.context);
    device.seed(0);
    let dense = shape.clone().with_routing(Routing::Dense).init(&device)?;
    let tsa = shape
        .clone()
        .with_routing(Routing::tsa(0.001))
        .init(&device)?;

    let mut rows = Vec::new();
    for &batch in &args.batch {
        let mut rng = StdRng::seed_from_u64(batch as u64);
        let ids: Vec<i32> = (0..batch * seq)
            .map(|_| rng.random_range(0..shape.vocab_size as i32))
            .collect();
        let tokens = Tensor::<2, Int>::from_data(TensorData::new(ids, [batch, seq]), &device);
        let mut conds = Condition::of(Weights::Fresh, &tsa, Some(&dense), "");
        for &a in &args.alphas {
            let calibrated = calibrate(tsa.clone(), &tokens, a)?;
            conds.extend(Condition::of(
                Weights::Calibrated,
                &calibrated,
                None,
                &a.to_string(),
            ));
        }
        if let Some(m) = &trained {
            conds.extend(Condition::of(Weights::Trained, m, None, ""));
        }
        for c in conds.iter_mut() {
            (c.soft_alpha, c.alpha) = alphas(&c.model, &tokens, c.exec)?;
        }

        let pb = ProgressBar::new(((args.warmup + args.runs) * conds.len()) as u64);
        pb.set_style(
            ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} forwards, eta {eta}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        pb.set_message(format!("batch {batch}"));
        for round in 0..args.warmup + args.runs {
            for c in conds.iter_mut() {
                let t0 = Instant::now();
                let out = c.model.forward(tokens.clone(), c.exec);
                // Reading one logit waits for the device to finish the whole pass.
                read(out.logits.narrow(0, 0, 1).narrow(1, 0, 1).narrow(2, 0, 1))?;
                let ms = t0.elapsed().as_secs_f64() * 1e3;
                if round >= args.warmup {
                    c.times.push(ms);
                }
                pb.inc(1);
            }
        }
        pb.finish_and_clear();

        let base = median(&mut conds[0].times.clone());
        for c in conds.iter_mut() {
            let med = median(&mut c.times);
            rows.push(Row {
                condition: c.name.clone(),
                device: chosen.name.clone(),
                batch,
                seq,
                alpha: c.alpha,
                soft_alpha: c.soft_alpha,
                tlops_saved: c.alpha.map(|a| metrics::tlops_saved(a, shape.n_layers)),
                ms_median: med,
                ms_min: c.times.iter().copied().fold(f64::INFINITY, f64::min),
                ms_max: c.times.iter().copied().fold(0.0, f64::max),
                speedup: base / med,
            });
        }
    }

    let table = table(&rows, &shape);
    report::write(&dir.join("throughput.md"), &table)?;
    let jsonl = report::json_lines(&rows)?;
    report::write(&dir.join("throughput.jsonl"), &jsonl)?;
    if args.json {
        print!("{jsonl}");
    } else {
        println!("{table}");
    }
    eprintln!(
        "saved {} and {}",
        dir.join("throughput.md").display(),
        dir.join("throughput.jsonl").display()
    );
    Ok(rows)
}

fn table(rows: &[Row], shape: &TsaConfig) -> String {
    let header = [
        "condition",
        "batch",
        "soft α",
        "executed α",
        "TLOps saved (executed)",
        "ms median",
        "min–max",
        "speedup",
    ];
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.condition.clone(),
                r.batch.to_string(),
                r.soft_alpha.map_or("—".into(), |a| format!("{a:.3}")),
                r.alpha.map_or("—".into(), |a| format!("{a:.3}")),
                r.tlops_saved
                    .map_or("—".into(), |t| format!("{:.1}%", 100.0 * t)),
                ms(r.ms_median),
                format!("{}–{}", ms(r.ms_min), ms(r.ms_max)),
                format!("{:.3}×", r.speedup),
            ]
        })
        .collect();
    format!(
        "Forward passes on {}, d={} L={} H={} d_ff={} vocab={} seq={}\n\n{}",
        rows.first().map_or("?", |r| r.device.as_str()),
        shape.d_model,
        shape.n_layers,
        shape.n_heads,
        shape.d_ff,
        shape.vocab_size,
        rows.first().map_or(0, |r| r.seq),
        report::markdown(&header, &cells)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny(out: PathBuf) -> ThroughputArgs {
        ThroughputArgs {
            device: DeviceChoice::Cpu,
            shape: ShapeArgs {
                d_model: Some(32),
                layers: Some(3),
                heads: Some(2),
                d_ff: Some(64),
            },
            vocab: 20,
            batch: vec![4, 1],
            seq: 16,
            host_gather: false,
            alphas: vec![0.5, 0.75],
            warmup: 1,
            runs: 2,
            checkpoint: None,
            json: true,
            out,
        }
    }

    #[test]
    fn calibrated_routers_execute_the_target_alpha_and_rows_carry_the_json_keys() {
        let dir = std::env::temp_dir().join(format!("tsa-throughput-{}", std::process::id()));
        let rows = run(&tiny(dir.clone())).unwrap();
        // Per batch: baseline, soft, and sparse + queries at each α.
        assert_eq!(rows.len(), 2 * 6);
        for r in rows.iter().filter(|r| r.condition.contains("α=")) {
            let target: f64 = r.condition.rsplit('=').next().unwrap().parse().unwrap();
            let got = r.alpha.unwrap();
            // One token of 64 (batch 4) or 16 (batch 1) per router is the resolution.
            assert!(
                (got - target).abs() <= 1.0 / 16.0 + 1e-9,
                "{}: α {got} vs {target}",
                r.condition
            );
        }
        assert!(rows.iter().all(|r| r.ms_median > 0.0 && r.speedup > 0.0));
        assert_eq!(rows[0].speedup, 1.0);
        // Soft-TSA computes every block: executed α 1 and nothing saved, whatever its soft α
        // (fresh routers: p ≈ σ(−1) ≈ 0.27, so soft α ≈ 0.73).
        for r in rows.iter().filter(|r| r.condition == "soft-TSA") {
            assert_eq!((r.alpha, r.tlops_saved), (Some(1.0), Some(0.0)), "{r:?}");
            let soft = r.soft_alpha.unwrap();
            assert!(soft > 0.5 && soft < 0.95, "soft α {soft}");
        }
        let dense: Vec<&Row> = (rows.iter())
            .filter(|r| r.condition == "baseline (dense)")
            .collect();
        assert_eq!(dense.len(), 2);
        assert!(
            dense
                .iter()
                .all(|r| r.alpha.is_none() && r.soft_alpha.is_none())
        );
        let line = std::fs::read_to_string(dir.join("throughput.jsonl")).unwrap();
        let first: serde_json::Value = serde_json::from_str(line.lines().next().unwrap()).unwrap();
        for key in [
            "condition",
            "device",
            "batch",
            "seq",
            "alpha",
            "soft_alpha",
            "tlops_saved",
            "ms_median",
            "speedup",
        ] {
            assert!(first.get(key).is_some(), "missing {key}");
        }
        std::fs::remove_dir_all(dir).ok();
    }

    /// The checkpoint's rows: its weights with every block, and sparse with the keep scale its
    /// gate trained (straight-through: kept tokens unscaled).
    #[test]
    fn trained_weights_run_dense_and_sparse_as_they_were_trained() {
        let routing = Routing::Tsa {
            lambda: 0.0,
            gate: tsa_core::TsaGate::StraightThrough,
            target: None,
            commit: 0.0,
        };
        let config = TsaConfig::new(20)
            .with_d_model(32)
            .with_n_layers(3)
            .with_n_heads(2)
            .with_d_ff(64)
            .with_context(16)
            .with_routing(routing);
        let model = config.init(&burn::tensor::Device::flex()).unwrap();
        let conds = Condition::of(Weights::Trained, &model, None, "");
        let got: Vec<_> = (conds.iter())
            .map(|c| (c.name.as_str(), c.model.config.routing, c.exec))
            .collect();
        let keep = KeepScale::One;
        assert_eq!(
            got,
            [
                ("trained weights, dense", Routing::Dense, Execution::Soft),
                ("sparse-TSA (trained)", routing, Execution::Sparse(keep)),
                (
                    "sparse-TSA+queries (trained)",
                    routing,
                    Execution::SparseQueries(keep)
                ),
            ]
        );
    }

    #[test]
    fn flags_that_cannot_be_timed_are_refused_by_name() {
        let base = tiny(std::env::temp_dir().join("tsa-throughput-refused"));
        type BreakIt = fn(&mut ThroughputArgs);
        let cases: [(&str, BreakIt); 4] = [
            ("--batch", |a| a.batch = vec![8, 0]),
            ("--seq", |a| a.seq = 0),
            ("--runs", |a| a.runs = 0),
            ("--alphas", |a| a.alphas = vec![0.5, 1.5]),
        ];
        for (flag, break_it) in cases {
            let mut args = base.clone();
            break_it(&mut args);
            let err = run(&args).expect_err(flag).to_string();
            assert!(err.contains(flag), "{flag}: {err}");
        }
    }
}
