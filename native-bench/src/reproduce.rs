//! `reproduce TABLE --scale quick|paper`: every arm of one of the paper's tables (described as
//! data in tables.rs), same budget and seeds, written beside the paper's numbers as markdown, JSON
//! and SVG plots.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::Args;
use serde::{Deserialize, Serialize};
use tsa_core::data::tasks::TaskSet;
use tsa_core::read::block_on;
use tsa_core::{Execution, Recipe, Routing, evaluate, metrics};

use crate::device::{self, DeviceChoice};
use crate::report::{self, Series};
use crate::resume::{self, Source, Start, StateOut};
use crate::tables::{
    ArmSpec, Dataset, EXIT_THRESHOLDS, MATCHED_ALPHA, MATCHED_ARM, Plot, Scale, Table,
};
use crate::train::{self, Data, RunResult, TASK_EXAMPLES};

#[derive(Args, Debug, Clone)]
pub struct ReproduceArgs {
    #[arg(value_enum)]
    pub table: Table,
    #[arg(long, value_enum, default_value = "quick")]
    pub scale: Scale,
    #[arg(long, value_enum, default_value = "auto")]
    pub device: DeviceChoice,
    #[arg(long)]
    pub corpus: Option<PathBuf>,
    /// Override the number of training steps of every arm.
    #[arg(long)]
    pub steps: Option<usize>,
    #[arg(long, default_value_t = 1337)]
    pub seed: u64,
    #[arg(long, default_value = "results")]
    pub out: PathBuf,
    /// Continue an interrupted reproduce (same flags): arms that finished are read back from
    /// OUT/TABLE-arms/, and an arm stopped midway (Ctrl-C) continues from its training state.
    /// Without it every arm trains afresh.
    #[arg(long)]
    pub resume: bool,
}

/// One row of a reproduced table.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Arm {
    pub task: String,
    pub model: String,
    pub params: usize,
    pub val_loss: f64,
    pub bpc: f64,
    pub perplexity: f64,
    pub accuracy: f64,
    pub alpha: f64,
    pub tlops_saved: f64,
    /// Validation loss with sparse inference (TSA: p > 0.5 skips the FFN), and its α.
    pub sparse_val_loss: Option<f64>,
    pub sparse_alpha: Option<f64>,
    pub seconds: f64,
    /// Early exit: the confidence threshold used.
    pub threshold: Option<f64>,
    /// The model's blocks L (0 in arms kept by older versions: the table's).
    #[serde(default)]
    pub layers: usize,
}

impl Arm {
    /// Blocks run per token with the inference rule executed, L·(1 − TLOps saved): what
    /// compares a routed model with a shallower dense one. `table_layers` stands in for an
    /// arm kept without its L.
    pub fn blocks_per_token(&self, table_layers: usize) -> f64 {
        let layers = if self.layers > 0 {
            self.layers
        } else {
            table_layers
        };
        metrics::blocks_run(self.sparse_alpha.unwrap_or(self.alpha), layers)
    }
}

/// The recipe of every arm of a table: its model shape comes from the routing, its schedule is
/// shared (same budget and seed for every arm).
struct Shape {
    recipe: fn(usize, Routing) -> Recipe,
    steps: Option<usize>,
    seed: u64,
}

impl Shape {
    fn get(&self, vocab_size: usize, routing: Routing) -> Recipe {
        let mut r = (self.recipe)(vocab_size, routing);
        r.train = r.train.with_seed(self.seed);
        if let Some(n) = self.steps {
            r.train.steps = n;
        }
        r
    }

    fn name(&self) -> &'static str {
        (self.recipe)(1, Routing::Dense).name
    }
}

/// An arm's data, and what its training state records of it.
struct Loaded {
    data: Data,
    source: Source,
}

fn load(data: Dataset, args: &ReproduceArgs, shape: &Shape) -> Result<Loaded> {
    Ok(match data {
        Dataset::Shakespeare => {
            let ctx = shape.get(1, Routing::Dense).model.context;
            let f = train::load_corpus(args.corpus.as_ref(), ctx)?;
            Loaded {
                source: f.source(),
                data: Data::Lm(f.corpus),
            }
        }
        Dataset::Task(task) => {
            let (train, test) = TASK_EXAMPLES;
            Loaded {
                data: Data::Task(TaskSet::generate(task, train, test, args.seed)),
                source: Source {
                    task: Some(task),
                    ..Source::default()
                },
            }
        }
    })
}

/// The recipe an arm trains with.
fn arm_recipe(spec: &ArmSpec, data: &Data, shape: &Shape) -> Recipe {
    spec.recipe(shape.get(data.vocab_size(), spec.routing))
}

fn train_arm(
    spec: &ArmSpec,
    recipe: &Recipe,
    data: &Data,
    device: &burn::tensor::Device,
    start: Start,
    state: &StateOut,
) -> Result<(Arm, RunResult)> {
    let (task, routing) = (spec.data.name(), spec.routing);
    let r = train::run(
        &format!("{task}/{}", spec.label),
        data,
        &recipe.model,
        &recipe.train,
        recipe.eval_every,
        recipe.eval_batches,
        device,
        start,
        state,
    )?;
    if let Some(e) = &r.diverged {
        anyhow::bail!(
            "arm {task}/{}: {e}; its training state {} would replay the same steps with \
             --resume: change the recipe, or delete it",
            spec.label,
            state.path.display()
        );
    }
    if let Some(k) = r.stopped_at {
        return Err(resume::Interrupted(format!(
            "stopped in arm {task}/{} at step {k}, its training state in {}: the same command with --resume continues (finished arms are kept)",
            spec.label,
            state.path.display()
        ))
        .into());
    }
    // Sparse inference itself (gather/scatter), with the scale the variant was trained for.
    let (sparse_val_loss, sparse_alpha) = if routing.has_routers() {
        let eval = data.eval_set(
            recipe.eval_batches,
            recipe.train.batch_size,
            recipe.model.context,
            device,
        );
        let s = block_on(evaluate(
            &r.model,
            &eval,
            Execution::Sparse(routing.keep_scale()),
        ))?;
        (Some(s.loss), Some(s.alpha))
    } else {
        (None, None)
    };
    let l = r.last.clone();
    Ok((
        Arm {
            task,
            model: spec.label.clone(),
            params: r.params,
            val_loss: l.loss,
            bpc: l.bpc,
            perplexity: l.loss.exp(),
            accuracy: l.accuracy,
            alpha: l.alpha,
            tlops_saved: l.tlops_saved,
            sparse_val_loss,
            sparse_alpha,
            seconds: r.seconds,
            threshold: None,
            layers: recipe.model.n_layers,
        },
        r,
    ))
}

/// Early-exit evaluation at each threshold: (threshold, val loss, α).
fn exit_sweep(
    r: &RunResult,
    data: &Data,
    shape: &Shape,
    device: &burn::tensor::Device,
) -> Result<Vec<(f64, f64, f64)>> {
    let recipe = shape.get(data.vocab_size(), r.model.config.routing);
    let eval = data.eval_set(
        recipe.eval_batches,
        recipe.train.batch_size,
        r.model.config.context,
        device,
    );
    EXIT_THRESHOLDS
        .iter()
        .map(|&t| {
            let s = block_on(evaluate(&r.model, &eval, Execution::Exit { threshold: t }))?;
            Ok((t, s.loss, s.alpha))
        })
        .collect()
}

/// Writes early exit's sweep (markdown returned, plot to `svg`) and reports the arm at the
/// threshold whose α is nearest `target`.
fn report_exit_sweep(
    arm: &mut Arm,
    layers: usize,
    sweep: &[(f64, f64, f64)],
    target: f64,
    svg: &Path,
) -> Result<String> {
    let mut md = format!("\nEarly-exit threshold sweep (target α = {target:.3}):\n\n");
    md.push_str(&report::markdown(
        &["threshold", "val loss", "BPC", "α", "TLOps saved"],
        &sweep
            .iter()
            .map(|&(t, l, al)| {
                vec![
                    format!("{t}"),
                    format!("{l:.4}"),
                    format!("{:.4}", metrics::bpc(l)),
                    format!("{al:.3}"),
                    format!("{:.1}%", 100.0 * metrics::tlops_saved(al, layers)),
                ]
            })
            .collect::<Vec<_>>(),
    ));
    report::line_chart(
        svg,
        "Early exit: threshold sweep",
        "α (active fraction)",
        "validation loss",
        &[Series {
            name: "early exit".into(),
            points: sweep.iter().map(|&(_, l, al)| (al, l)).collect(),
        }],
    )?;
    let best = sweep
        .iter()
        .copied()
        .min_by(|x, y| (x.2 - target).abs().total_cmp(&(y.2 - target).abs()));
    if let Some((t, l, al)) = best {
        arm.threshold = Some(t);
        arm.val_loss = l;
        arm.bpc = metrics::bpc(l);
        arm.perplexity = l.exp();
        arm.alpha = al;
        arm.tlops_saved = metrics::tlops_saved(al, layers);
    }
    Ok(md)
}

/// Executed TLOps saved (x) against the validation loss that executing it gives (y).
fn pareto_chart(path: &Path, arms: &[Arm], exit: &[(f64, f64, f64)], layers: usize) -> Result<()> {
    // TLOps saved against the table's full-depth model, so shallower dense models sit where
    // their compute puts them; the dense models (full depth and shallower) form one line.
    let saved = |a: &Arm| 100.0 * (1.0 - a.blocks_per_token(layers) / layers as f64);
    let loss = |a: &Arm| a.sparse_val_loss.unwrap_or(a.val_loss);
    let dense = |a: &Arm| a.model.starts_with("Baseline");
    let mut frontier: Vec<&Arm> = arms.iter().filter(|a| dense(a)).collect();
    frontier.sort_by(|x, y| saved(x).total_cmp(&saved(y)));
    // Named by the depths the table trained, not a list kept beside tables.rs's.
    let depths: Vec<String> = (frontier.iter())
        .map(|a| if a.layers > 0 { a.layers } else { layers }.to_string())
        .collect();
    let mut series = vec![Series {
        name: format!("Dense (L={})", depths.join(", ")),
        points: frontier.iter().map(|a| (saved(a), loss(a))).collect(),
    }];
    series.extend(
        arms.iter()
            .filter(|a| a.model != "Early Exit" && !dense(a))
            .map(|a| Series {
                name: a.model.clone(),
                points: vec![(saved(a), loss(a))],
            }),
    );
    series.push(Series {
        name: "Early exit (thresholds)".into(),
        points: exit
            .iter()
            .map(|&(_, l, al)| (100.0 * metrics::tlops_saved(al, layers), l))
            .collect(),
    });
    report::line_chart(
        path,
        "Validation loss vs executed TLOps saved",
        "executed TLOps saved (%, of the full-depth model's)",
        "validation loss (executed)",
        &series,
    )
}

/// The reproduced rows as a markdown table.
fn arms_md(arms: &[Arm], table_layers: usize) -> String {
    let header = [
        "task",
        "model",
        "params",
        "val loss",
        "BPC",
        "ppl",
        "accuracy",
        "soft α",
        "soft TLOps saved",
        "sparse val loss (executed α)",
        "blocks run per token (executed)",
        "threshold",
        "train s",
    ];
    let rows: Vec<Vec<String>> = arms
        .iter()
        .map(|a| {
            vec![
                a.task.clone(),
                a.model.clone(),
                a.params.to_string(),
                format!("{:.4}", a.val_loss),
                format!("{:.4}", a.bpc),
                format!("{:.3}", a.perplexity),
                format!("{:.4}", a.accuracy),
                format!("{:.3}", a.alpha),
                format!("{:.1}%", 100.0 * a.tlops_saved),
                a.sparse_val_loss.map_or("—".into(), |l| {
                    format!("{l:.4} ({:.3})", a.sparse_alpha.unwrap_or(f64::NAN))
                }),
                format!("{:.2}", a.blocks_per_token(table_layers)),
                a.threshold.map_or("—".into(), |t| t.to_string()),
                format!("{:.0}", a.seconds),
            ]
        })
        .collect();
    report::markdown(&header, &rows)
}

/// A finished arm, kept so that `--resume` need not train it again.
#[derive(Serialize, Deserialize)]
struct Finished {
    /// What the arm trained (label, data, model, schedule, device) as JSON: reused only for
    /// the same.
    key: String,
    /// Its row before early exit's threshold is chosen.
    arm: Arm,
    /// (step, validation loss).
    curve: Vec<(f64, f64)>,
    /// Early exit: (threshold, val loss, α) at each threshold.
    exit_sweep: Vec<(f64, f64, f64)>,
}

/// The arm kept at `path`, if it trained what `key` describes.
fn finished(path: &Path, key: &str) -> Option<Finished> {
    let bytes = std::fs::read(path).ok()?;
    match serde_json::from_slice::<Finished>(&bytes) {
        Ok(done) if done.key == key => Some(done),
        Ok(_) => {
            eprintln!("{}: kept for another recipe; trained again", path.display());
            None
        }
        Err(e) => {
            eprintln!("{}: unreadable ({e}); trained again", path.display());
            None
        }
    }
}

/// An arm stopped midway, from its training state, if that state is of this arm's recipe and
/// data; otherwise the arm trains afresh.
fn resume_arm(state: &StateOut, recipe: &Recipe, device: &burn::tensor::Device) -> Result<Start> {
    let path = &state.path;
    let (r, so_far) = resume::read_state(path, device)?;
    let same = r.meta.config == recipe.model
        && r.trainer.config == recipe.train
        && (so_far.eval_every, so_far.eval_batches) == (recipe.eval_every, recipe.eval_batches)
        && (so_far.task, so_far.corpus_crc) == (state.source.task, state.source.corpus_crc);
    if !same {
        eprintln!(
            "{}: the state of another recipe or data; trained afresh",
            path.display()
        );
        return Ok(Start::Fresh);
    }
    eprintln!(
        "{}: resuming at step {} of {}",
        so_far.label, r.trainer.step, recipe.train.steps
    );
    Ok(Start::Resume {
        trainer: Box::new(r.trainer),
        so_far,
    })
}

/// Trains every arm of `args.table` in order and writes the report.
pub fn main(args: &ReproduceArgs) -> Result<()> {
    let chosen = device::choose(args.device)?;
    let device = chosen.device.clone();
    eprintln!("device: {}", chosen.name);
    let dir = report::results_dir(&args.out)?;
    let name = format!("{:?}", args.table).to_lowercase();
    let spec = args.table.spec();
    let shape = Shape {
        recipe: spec.recipes.at(args.scale),
        steps: args.steps,
        seed: args.seed,
    };
    // The table's full depth (an arm may be shallower).
    let table_layers = shape.get(1, Routing::Dense).model.n_layers;
    let mut arms: Vec<Arm> = Vec::new();
    let mut curves: Vec<Series> = Vec::new();
    let mut extra_md = String::new();
    let mut exit_points = Vec::new();
    let mut matched_alpha = None;
    let kept = dir.join(format!("{name}-arms"));
    std::fs::create_dir_all(&kept).with_context(|| format!("cannot create {}", kept.display()))?;
    resume::stop_on_ctrl_c();
    let mut index = 0;
    // A table's arms on the same data stand together, so each data set is loaded once.
    for group in spec.arms.chunk_by(|a, b| a.data == b.data) {
        let loaded = load(group[0].data, args, &shape)?;
        let data = &loaded.data;
        for spec_arm in group {
            index += 1;
            if resume::interrupted() {
                return Err(resume::Interrupted(format!(
                    "interrupted before arm {}/{}: the same command with --resume continues (finished arms are kept)",
                    spec_arm.data.name(),
                    spec_arm.label
                ))
                .into());
            }
            let recipe = arm_recipe(spec_arm, data, &shape);
            // Compared as text: what was written is what is compared (no float parsed back).
            let key = serde_json::to_string(&serde_json::json!({
                "label": spec_arm.label,
                "data": spec_arm.data.name(),
                "corpus_crc": loaded.source.corpus_crc,
                "model": recipe.model,
                "train": recipe.train,
                "eval": [recipe.eval_every, recipe.eval_batches],
                "device": chosen.name,
            }))?;
            let done_path = kept.join(format!("{index:02}.json"));
            let state = StateOut {
                path: kept.join(format!("{index:02}.state")),
                stop_at: None,
                source: loaded.source.clone(),
                out: None,
                log: None,
            };
            let done = match args.resume {
                true => finished(&done_path, &key),
                false => None,
            };
            let done = match done {
                Some(done) => {
                    resume::remove_if_there(&state.path)?;
                    eprintln!(
                        "{}/{}: finished in an earlier run, read back from {}",
                        spec_arm.data.name(),
                        spec_arm.label,
                        done_path.display()
                    );
                    done
                }
                None => {
                    let start = match args.resume && state.path.exists() {
                        true => resume_arm(&state, &recipe, &device)?,
                        false => Start::Fresh,
                    };
                    let (a, r) = train_arm(spec_arm, &recipe, data, &device, start, &state)?;
                    let exit_sweep = match spec_arm.routing {
                        Routing::EarlyExit => exit_sweep(&r, data, &shape, &device)?,
                        _ => Vec::new(),
                    };
                    let done = Finished {
                        key,
                        arm: a,
                        curve: r
                            .curve
                            .iter()
                            .map(|p| (p.step as f64, p.val_loss))
                            .collect(),
                        exit_sweep,
                    };
                    // Kept before its state goes: a stop in between loses nothing.
                    resume::write_atomically(&done_path, &serde_json::to_vec_pretty(&done)?)?;
                    resume::remove_if_there(&state.path)?;
                    done
                }
            };
            let mut a = done.arm;
            if spec_arm.label == MATCHED_ARM {
                matched_alpha = Some(a.alpha);
            }
            if spec_arm.routing == Routing::EarlyExit {
                exit_points = done.exit_sweep;
                extra_md.push_str(&report_exit_sweep(
                    &mut a,
                    recipe.model.n_layers,
                    &exit_points,
                    matched_alpha.unwrap_or(MATCHED_ALPHA),
                    &dir.join(format!("{name}-exit-sweep.svg")),
                )?);
            }
            curves.push(Series {
                name: format!("{} {}", a.task, a.model),
                points: done.curve,
            });
            arms.push(a);
        }
    }
    match spec.plot {
        Some(Plot::Pareto) => pareto_chart(
            &dir.join(format!("{name}.svg")),
            &arms,
            &exit_points,
            table_layers,
        )?,
        Some(Plot::LambdaSweep) => report::line_chart(
            &dir.join(format!("{name}-pareto.svg")),
            "λ sweep: quality vs compute",
            "α (active fraction)",
            "validation loss",
            &[Series {
                name: "TSA".into(),
                points: arms.iter().map(|a| (a.alpha, a.val_loss)).collect(),
            }],
        )?,
        None => {}
    }
    report::line_chart(
        &dir.join(format!("{name}-curves.svg")),
        &format!("{name}: validation loss"),
        "step",
        "validation loss",
        &curves,
    )?;
    let scale = format!("{:?}", args.scale).to_lowercase();
    let steps = args
        .steps
        .map_or(String::new(), |n| format!(" --steps {n}"));
    let md = format!(
        "# {name} ({scale} scale) on {}\n\nCommand: `cargo run --release -p native-bench -- reproduce {name} --scale {scale}{steps}` (recipe `{}`, core/src/recipe.rs)\n\n{}{extra_md}\n\nThe paper's numbers:\n\n{}\n",
        chosen.name,
        shape.name(),
        arms_md(&arms, table_layers),
        spec.paper_md()
    );
    report::write(&dir.join(format!("{name}.md")), &md)?;
    report::write(
        &dir.join(format!("{name}.json")),
        &serde_json::to_string_pretty(&arms)?,
    )?;
    println!(
        "{md}\nsaved {}/{name}.{{md,json}} and SVG plots",
        dir.display()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arm(layers: usize, alpha: f64, sparse_alpha: Option<f64>) -> Arm {
        Arm {
            task: "shakespeare".into(),
            model: "m".into(),
            params: 1,
            val_loss: 2.0,
            bpc: 2.9,
            perplexity: 7.4,
            accuracy: 0.4,
            alpha,
            tlops_saved: metrics::tlops_saved(alpha, layers.max(1)),
            sparse_val_loss: sparse_alpha.map(|_| 2.1),
            sparse_alpha,
            seconds: 1.0,
            threshold: None,
            layers,
        }
    }

    #[test]
    fn blocks_per_token_counts_what_executes_at_each_depth() {
        let close = |x: f64, y: f64| (x - y).abs() < 1e-12;
        // Dense at 6 and 4 blocks; a routed model whose rule runs half the routed blocks runs
        // the stem and 2.5 of the other 5, whatever its soft α.
        assert!(close(arm(6, 1.0, None).blocks_per_token(6), 6.0));
        assert!(close(arm(4, 1.0, None).blocks_per_token(6), 4.0));
        assert!(close(arm(6, 0.3, Some(0.5)).blocks_per_token(6), 3.5));
        // An arm kept by an older version (no L recorded) takes the table's.
        assert!(close(arm(0, 1.0, None).blocks_per_token(6), 6.0));
        let md = arms_md(&[arm(3, 1.0, None), arm(6, 0.3, Some(0.5))], 6);
        assert!(md.contains("| 3.00 |") && md.contains("| 3.50 |"), "{md}");
    }
}
