//! `train`: any routing variant on a corpus or a synthetic task, with a progress bar, periodic
//! evaluation, a checkpoint and a JSON log. `reproduce` runs its arms through [`run`].

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result};
use burn::tensor::Device;
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use rand::SeedableRng;
use rand::rngs::StdRng;
use serde::{Deserialize, Serialize};
use tsa_core::checkpoint::{self, CheckpointMeta};
use tsa_core::data::Batch;
use tsa_core::data::Corpus;
use tsa_core::data::tasks::{Task, TaskSet};
use tsa_core::read::block_on;
use tsa_core::{
    EvalStats, Execution, InitScheme, Preset, Recipe, Routing, RoutingKind, StepStats, TrainConfig,
    Trainer, TsaConfig, TsaError, TsaGate, TsaModel, evaluate,
};

use crate::args::{ShapeArgs, corpus_from, read_corpus};
use crate::device::{self, DeviceChoice};
use crate::resume::{
    Interrupted, Progress, Source, Start, StateOut, absolute, interrupted, read_state,
    remove_if_there, stop_on_ctrl_c, write_atomically,
};

/// A synthetic task's training and held-out examples, generated from the seed.
pub const TASK_EXAMPLES: (usize, usize) = (10_000, 1_000);

#[derive(Args, Debug, Clone)]
pub struct TrainArgs {
    #[arg(long, value_enum, default_value = "tsa")]
    pub routing: RoutingKind,
    /// Model and schedule to start from (the synthetic tasks always use the paper's §3.1 one).
    #[arg(long, value_enum, default_value = "paper")]
    pub recipe: Preset,
    /// TSA depth-loss weight λ.
    #[arg(long, default_value_t = 0.001)]
    pub lambda: f64,
    /// TSA gate in training: the paper's soft gate, or one whose forward pass executes.
    #[arg(long, value_enum, default_value = "soft")]
    pub gate: TsaGate,
    /// TSA: hold the executed α at most at this value (a Lagrange multiplier on the depth loss).
    #[arg(long)]
    pub target: Option<f64>,
    /// TSA commitment weight β: adds β·mean 4p(1 − p), pushing halting probabilities away from
    /// the threshold 0.5 (0: the paper's objective).
    #[arg(long, default_value_t = 0.0)]
    pub commit: f64,
    /// MoD capacity (share of each sequence a routed block processes).
    #[arg(long, default_value_t = 0.75)]
    pub capacity: f64,
    /// Train on a synthetic task instead of a corpus (with the paper's §3.1 recipe, so neither
    /// --recipe nor --corpus applies).
    #[arg(long, value_enum, conflicts_with_all = ["recipe", "corpus"])]
    pub task: Option<Task>,
    /// Any UTF-8 text (default: Tiny-Shakespeare from $TSA_CORPUS or data/tinyshakespeare.txt).
    #[arg(long)]
    pub corpus: Option<PathBuf>,
    #[command(flatten)]
    pub shape: ShapeArgs,
    #[arg(long)]
    pub context: Option<usize>,
    #[arg(long)]
    pub steps: Option<usize>,
    #[arg(long)]
    pub batch: Option<usize>,
    #[arg(long)]
    pub lr: Option<f64>,
    #[arg(long)]
    pub warmup: Option<usize>,
    /// TSA with --target: the target falls linearly from α = 1 to it over this share of
    /// training (0: the target from the first step).
    #[arg(long)]
    pub target_ramp: Option<f64>,
    /// The routers learn at this multiple of --lr (the paper's 3e-4 barely moves them).
    #[arg(long)]
    pub router_lr_scale: Option<f64>,
    /// Tokens a hard training gate halts (--gate straight-through|straight-through-scaled|gumbel,
    /// or --routing mod) skip the FFN in training too, by gathered rows: faster on the CPU
    /// (docs/RESULTS.md); TSA's routers then learn nothing through the FFN update of the tokens
    /// they halt.
    #[arg(long)]
    pub skip_halted: bool,
    #[arg(long)]
    pub dropout: Option<f64>,
    /// Initialisation of the linear layers the paper's Appendix A does not name.
    #[arg(long, value_enum)]
    pub init: Option<InitScheme>,
    /// Router final-bias initialisation (the paper: −1).
    #[arg(long, allow_hyphen_values = true)]
    pub router_bias: Option<f64>,
    #[arg(long, default_value_t = 1337)]
    pub seed: u64,
    /// Start from these weights (a checkpoint, or a safetensors export such as the PyTorch
    /// twin's) instead of a fresh initialisation; their shapes must fit the recipe's model.
    #[arg(long)]
    pub init_from: Option<PathBuf>,
    /// Evaluate every this many steps (default: the recipe's).
    #[arg(long, value_parser = crate::args::positive)]
    pub eval_every: Option<usize>,
    /// Validation batches per evaluation (default: the recipe's).
    #[arg(long, value_parser = crate::args::positive)]
    pub eval_batches: Option<usize>,
    #[arg(long, value_enum, default_value = "auto")]
    pub device: DeviceChoice,
    /// Checkpoint out, loadable by the web app and by `--checkpoint` elsewhere (default
    /// results/model.tsa; with --resume, the stopped run's).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// JSON log, one line per evaluation (default results/train-log.jsonl; with --resume, the
    /// stopped run's).
    #[arg(long)]
    pub log: Option<PathBuf>,
    /// Continue a stopped run from its training state (`--state`, written at every evaluation
    /// and when a run stops early). Model, recipe, step, optimiser and batch stream come from
    /// the state; the corpus must be the one it trained on.
    #[arg(long, conflicts_with_all = RECIPE_FLAGS)]
    pub resume: Option<PathBuf>,
    /// Stop after this step, writing the checkpoint, the log and the training state: one run
    /// split over several sessions (e.g. time-limited GPU slots), continued with --resume.
    /// Ctrl-C does the same at the step it interrupts.
    #[arg(long)]
    pub stop_at: Option<usize>,
    /// The training state's file (default: --out with the extension `.state`; with --resume,
    /// the file resumed from); removed when the run completes.
    #[arg(long)]
    pub state: Option<PathBuf>,
    /// Write every window this run trains and evaluates on (offsets into the corpus's train
    /// and validation splits, JSON) before training: `tests/parity/torch_twin.py --windows`
    /// replays them.
    #[arg(long)]
    pub windows_out: Option<PathBuf>,
}

/// Everything that shapes a run: a resumed run takes them from its state, so giving one with
/// --resume is refused rather than ignored.
const RECIPE_FLAGS: [&str; 28] = [
    "routing",
    "recipe",
    "lambda",
    "gate",
    "target",
    "commit",
    "capacity",
    "task",
    "d_model",
    "layers",
    "heads",
    "d_ff",
    "context",
    "steps",
    "batch",
    "lr",
    "warmup",
    "target_ramp",
    "router_lr_scale",
    "skip_halted",
    "dropout",
    "init",
    "router_bias",
    "seed",
    "init_from",
    "eval_every",
    "eval_batches",
    "windows_out",
];

/// Where a run writes: checkpoint, log, training state.
struct Files {
    out: PathBuf,
    log: PathBuf,
    state: PathBuf,
}

impl TrainArgs {
    /// The flags' files, else a resumed run's own (`prior`), else the defaults.
    fn files(&self, prior: Option<&Progress>) -> Files {
        let out = (self.out.clone())
            .or_else(|| prior.and_then(|p| p.out.clone()))
            .unwrap_or_else(|| PathBuf::from("results/model.tsa"));
        let log = (self.log.clone())
            .or_else(|| prior.and_then(|p| p.log.clone()))
            .unwrap_or_else(|| PathBuf::from("results/train-log.jsonl"));
        let state = (self.state.clone())
            .or_else(|| self.resume.clone())
            .unwrap_or_else(|| out.with_extension("state"));
        Files { out, log, state }
    }

    pub fn routing(&self) -> Routing {
        self.routing.with(
            self.lambda,
            self.gate,
            self.target,
            self.commit,
            self.capacity,
        )
    }

    /// The recipe with every given flag applied.
    pub fn recipe(&self, vocab_size: usize) -> Recipe {
        let base = match self.task {
            Some(_) => Recipe::synthetic(self.routing()),
            None => self.recipe.recipe(vocab_size, self.routing()),
        };
        let mut model = self.shape.apply(base.model);
        let mut train = base.train.with_seed(self.seed);
        // Each flag given replaces its part of the recipe.
        fn set<T: Copy>(part: &mut T, flag: Option<T>) {
            if let Some(v) = flag {
                *part = v;
            }
        }
        set(&mut model.context, self.context);
        set(&mut model.dropout, self.dropout);
        set(&mut model.init, self.init);
        set(&mut model.router_bias, self.router_bias);
        set(&mut train.steps, self.steps);
        set(&mut train.batch_size, self.batch);
        set(&mut train.lr, self.lr);
        set(&mut train.warmup_steps, self.warmup);
        set(&mut train.target_ramp, self.target_ramp);
        set(&mut train.router_lr_scale, self.router_lr_scale);
        train.skip_halted = self.skip_halted;
        Recipe {
            model,
            train,
            eval_every: self.eval_every.unwrap_or(base.eval_every).max(1),
            eval_batches: self.eval_batches.unwrap_or(base.eval_batches).max(1),
            ..base
        }
    }
}

/// Where batches come from (core's; `reproduce` names it through this module).
pub use tsa_core::data::Data;

/// A corpus with where it came from: what a training state records of it.
pub struct CorpusFile {
    pub corpus: Corpus,
    /// The file, absolute.
    pub path: PathBuf,
    pub crc: u32,
}

impl CorpusFile {
    /// What a training state records of it.
    pub fn source(&self) -> Source {
        Source {
            vocab: Some(self.corpus.tokenizer.clone()),
            task: None,
            corpus: Some(self.path.clone()),
            corpus_crc: Some(self.crc),
        }
    }
}

/// The corpus (the flag, $TSA_CORPUS or the default) in windows of `context`.
pub fn load_corpus(path: Option<&PathBuf>, context: usize) -> Result<CorpusFile> {
    let (path, bytes) = read_corpus(path)?;
    let corpus = Corpus::from_bytes(&bytes, context)
        .with_context(|| format!("corpus {}", path.display()))?;
    Ok(CorpusFile {
        corpus,
        path: absolute(&path),
        crc: crc32fast::hash(&bytes),
    })
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EvalPoint {
    pub step: usize,
    pub train_loss: f32,
    pub val_loss: f64,
    pub bpc: f64,
    pub alpha: f64,
    pub tlops_saved: f64,
    /// α and TLOps saved under the inference rule (p ≤ 0.5 runs).
    pub executed_alpha: f64,
    pub executed_tlops_saved: f64,
    /// Validation loss when that rule is executed (hard routing; equal to sparse inference).
    pub hard_val_loss: Option<f64>,
    pub accuracy: f64,
    pub tokens_per_s: f64,
    /// The compute target's multiplier μ (0 without a target). Defaults: logs of older
    /// versions lack the last three fields, and `compare` still reads them.
    #[serde(default)]
    pub mu: f64,
    /// Per router, the share of tokens in each tenth of p.
    #[serde(default)]
    pub p_histogram: Vec<Vec<f64>>,
    /// The model's blocks L (0 in older logs), so that runs of different depths compare by
    /// blocks run per token.
    #[serde(default)]
    pub layers: usize,
}

pub struct RunResult {
    pub model: TsaModel,
    pub curve: Vec<EvalPoint>,
    /// The final soft evaluation, and the same with the inference rule executed (routers only).
    pub last: EvalStats,
    pub hard: Option<EvalStats>,
    pub params: usize,
    /// Training seconds, earlier sessions of a resumed run included.
    pub seconds: f64,
    /// Optimiser steps the model has had.
    pub step: usize,
    /// Where the run stopped before its last step (`--stop-at`, Ctrl-C), its state written.
    pub stopped_at: Option<usize>,
    /// Why the run ended early with its last good model (a NaN loss).
    pub diverged: Option<TsaError>,
}

/// Trains one model (from `start`) and evaluates it every `eval_every` steps and at the end,
/// writing its training state at every evaluation before the last, and stops early when asked
/// (`--stop-at`, Ctrl-C) with an evaluation and the state written.
#[allow(clippy::too_many_arguments)]
pub fn run(
    label: &str,
    data: &Data,
    model: &TsaConfig,
    train: &TrainConfig,
    eval_every: usize,
    eval_batches: usize,
    device: &Device,
    start: Start,
    state: &StateOut,
) -> Result<RunResult> {
    let (mut trainer, mut curve, before) = match start {
        Start::Fresh => (Trainer::new(model, train.clone(), device)?, Vec::new(), 0.0),
        Start::Weights(weights) => {
            train.validate_for(&model.routing)?;
            let ad = device.clone().autodiff();
            let fresh = model.init(&ad)?;
            let loaded = burn::module::Module::try_load_record(
                fresh,
                burn::module::Module::into_record(*weights),
            )
            .map_err(|e| anyhow::anyhow!("--init-from: the weights do not fit the model: {e}"))?;
            (
                Trainer::from_model(loaded, train.clone(), 0),
                Vec::new(),
                0.0,
            )
        }
        Start::Resume { trainer, so_far } => (*trainer, so_far.curve, so_far.seconds),
    };
    let first = trainer.step;
    let ad = trainer.model.device();
    let eval = data.eval_set(eval_batches, train.batch_size, model.context, device);
    // Draws the training batches and nothing else: `Corpus::window_log` replays it, and a
    // resumed run skips the draws of the steps it already made.
    let mut rng = StdRng::seed_from_u64(train.seed);
    data.skip_train_batches(first, train.batch_size, model.context, &mut rng);
    let pb = ProgressBar::new(train.steps as u64);
    pb.set_style(
        ProgressStyle::with_template("{prefix} [{bar:25}] {pos}/{len} {msg} eta {eta}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    pb.set_prefix(label.to_string());
    pb.set_position(first as u64);
    pb.reset_eta();
    let start = Instant::now();
    let mut last = None;
    // The last state on disk: a resumed run's own, until this run writes one.
    let mut saved = (first > 0 && state.path.exists()).then_some(first);
    let mut stopped_at = None;
    let mut diverged = None;
    // The last good step's numbers, for the evaluation a divergence ends the run with.
    let mut previous = None;
    for s in first..train.steps {
        let batch = data.train_batch(train.batch_size, model.context, &mut rng, &ad);
        let st = match block_on(trainer.step(&batch)) {
            Ok(st) => st,
            // A NaN leaves the model as it was: the run ends with it, evaluated and written,
            // as a stop does.
            Err(e @ TsaError::NonFiniteLoss { .. }) if previous.is_some() => {
                diverged = Some(e);
                break;
            }
            // At this session's first step (a resumed run's model evaluated when it stopped).
            Err(e @ TsaError::NonFiniteLoss { .. }) => {
                pb.finish_and_clear();
                return Err(keep_last_evaluated(format!("{label}: {e}"), saved, state));
            }
            Err(e) => {
                return Err(e).with_context(|| match saved {
                    Some(k) => format!(
                        "{label}: training stopped; the training state of step {k} is in {} (a \
                         checkpoint for eval and sample; resuming replays the same batches)",
                        state.path.display()
                    ),
                    None => format!("{label}: training stopped"),
                });
            }
        };
        let tps = ((st.step - first) * batch.inputs.dims().iter().product::<usize>()) as f64
            / start.elapsed().as_secs_f64();
        pb.set_message(format!(
            "loss {:.3} α {:.3} executed {:.3} {:.0} tok/s",
            st.task_loss, st.alpha, st.executed_alpha, tps
        ));
        pb.inc(1);
        let stop = st.step < train.steps && (state.stop_at == Some(st.step) || interrupted());
        if st.step % eval_every == 0 || s + 1 == train.steps || stop {
            let point = match evaluate_point(&trainer, &eval, model, &st, tps, label, &pb) {
                Ok(point) => point,
                Err(why) => {
                    pb.finish_and_clear();
                    let why = format!("{label}: the evaluation at step {} failed: {why}", st.step);
                    return Err(keep_last_evaluated(why, saved, state));
                }
            };
            last = Some(record(&mut curve, point, state)?);
            // The last step's state is not needed: the run is complete.
            if st.step < train.steps {
                let seconds = before + start.elapsed().as_secs_f64();
                state.write(&trainer, label, (eval_every, eval_batches), &curve, seconds)?;
                saved = Some(st.step);
            }
        }
        if stop {
            stopped_at = Some(st.step);
            break;
        }
        previous = Some((st, tps));
    }
    if let (Some(e), Some((st, tps))) = (&diverged, &previous)
        && curve.last().map(|p| p.step) != Some(st.step)
    {
        // Usually the update before the NaN already broke the weights (the loss is computed
        // from them): then the last model that evaluated is the one in the last training
        // state, and that is what the checkpoint gets; the log already ends at it.
        let point = match evaluate_point(&trainer, &eval, model, st, *tps, label, &pb) {
            Ok(point) => point,
            Err(why) => {
                pb.finish_and_clear();
                let why = format!(
                    "{label}: {e}, and the model of step {} does not evaluate ({why}; is the \
                     learning rate too high?)",
                    st.step
                );
                return Err(keep_last_evaluated(why, saved, state));
            }
        };
        last = Some(record(&mut curve, point, state)?);
    }
    pb.finish_and_clear();
    let model_out = trainer.inference_model();
    let params = burn::module::Module::num_params(&model_out);
    let (last, hard) = last.context("no evaluation ran")?;
    Ok(RunResult {
        model: model_out,
        curve,
        last,
        hard,
        params,
        seconds: before + start.elapsed().as_secs_f64(),
        step: trainer.step,
        stopped_at,
        diverged,
    })
}

/// The error that ends a run whose model no longer evaluates (usually: the update before a
/// NaN made the weights non-finite). The last model that did is in the last training state
/// (`saved`: its step); `train` copies it to its checkpoint, whose log already ends there.
fn keep_last_evaluated(why: String, saved: Option<usize>, state: &StateOut) -> anyhow::Error {
    let Some(k) = saved else {
        return anyhow::anyhow!("{why}; no evaluation succeeded, nothing written");
    };
    let at = state.path.display();
    let Some(out) = &state.out else {
        return anyhow::anyhow!(
            "{why}; the last model that evaluated, of step {k}, is in the training state {at} \
             (resuming it replays the same steps: change the recipe, or delete it)"
        );
    };
    let copied = std::fs::read(&state.path)
        .map_err(anyhow::Error::from)
        .and_then(|bytes| write_atomically(out, tsa_core::train_state::checkpoint_bytes(&bytes)?));
    match copied {
        Ok(()) => anyhow::anyhow!(
            "{why}; the last model that evaluated, of step {k}, is in {} (the log ends at it; \
             its training state is {at})",
            out.display()
        ),
        Err(e) => anyhow::anyhow!(
            "{why}; the last model that evaluated, of step {k}, is in the training state {at} \
             (copying it to {} failed: {e})",
            out.display()
        ),
    }
}

/// Adds an evaluation to the curve and rewrites the log with it (where the run has one:
/// `train`'s, not `reproduce`'s arms); returns its soft and executed stats.
fn record(
    curve: &mut Vec<EvalPoint>,
    (point, soft, hard): (EvalPoint, EvalStats, Option<EvalStats>),
    state: &StateOut,
) -> Result<(EvalStats, Option<EvalStats>)> {
    curve.push(point);
    if let Some(log) = &state.log {
        write_atomically(log, crate::report::json_lines(curve)?.as_bytes())?;
    }
    Ok((soft, hard))
}

/// Evaluates the trainer's model soft and, where it routes, with the inference rule executed;
/// prints the line and returns the log's point.
fn evaluate_point(
    trainer: &Trainer,
    eval: &[Batch],
    model: &TsaConfig,
    st: &StepStats,
    tokens_per_s: f64,
    label: &str,
    pb: &ProgressBar,
) -> Result<(EvalPoint, EvalStats, Option<EvalStats>)> {
    let inference = trainer.inference_model();
    let ev = block_on(evaluate(&inference, eval, Execution::Soft))?;
    let hard = match model.routing.has_routers() {
        true => Some(block_on(evaluate(
            &inference,
            eval,
            Execution::Hard(model.routing.keep_scale()),
        ))?),
        false => None,
    };
    let hard_val_loss = hard.as_ref().map(|h| h.loss);
    let line = format!(
        "{label} step {:>5}: val {:.4} (bpc {:.3}) α soft {:.3} executed {:.3} (TLOps saved {:.1}%){} acc {:.4}{}",
        st.step,
        ev.loss,
        ev.bpc,
        ev.alpha,
        ev.executed_alpha,
        100.0 * ev.executed_tlops_saved,
        hard_val_loss.map_or(String::new(), |l| format!(" executed val {l:.4}")),
        ev.accuracy,
        if st.mu != 0.0 {
            format!(" μ {:+.4}", st.mu)
        } else {
            String::new()
        },
    );
    // A hidden bar (output to a file or a pipe) drops `println`: print the line itself.
    if pb.is_hidden() {
        eprintln!("{line}");
    } else {
        pb.println(line);
    }
    let point = EvalPoint {
        step: st.step,
        train_loss: st.task_loss,
        val_loss: ev.loss,
        bpc: ev.bpc,
        alpha: ev.alpha,
        tlops_saved: ev.tlops_saved,
        executed_alpha: ev.executed_alpha,
        executed_tlops_saved: ev.executed_tlops_saved,
        hard_val_loss,
        accuracy: ev.accuracy,
        tokens_per_s,
        mu: st.mu,
        p_histogram: ev.p_histogram.clone(),
        layers: model.n_layers,
    };
    Ok((point, ev, hard))
}

/// A run ready to go: from flags, or from a training state.
struct Plan {
    label: String,
    data: Data,
    source: Source,
    model: TsaConfig,
    train: TrainConfig,
    eval_every: usize,
    eval_batches: usize,
    start: Start,
}

/// A new run from the flags.
fn fresh(args: &TrainArgs, device: &Device) -> Result<Plan> {
    let (data, source) = match args.task {
        Some(task) => (
            Data::Task(TaskSet::generate(
                task,
                TASK_EXAMPLES.0,
                TASK_EXAMPLES.1,
                args.seed,
            )),
            Source {
                task: Some(task),
                ..Source::default()
            },
        ),
        None => {
            let ctx = args.recipe(1).model.context;
            let f = load_corpus(args.corpus.as_ref(), ctx)?;
            let source = f.source();
            (Data::Lm(f.corpus), source)
        }
    };
    let recipe = args.recipe(data.vocab_size());
    let (model, train) = (recipe.model.clone(), recipe.train.clone());
    eprintln!(
        "recipe {}: {}; lr {}{} (warm-up {}), batch {}, context {}, dropout {}, init {:?}, {} steps{}{}",
        recipe.name,
        model.routing.label(),
        train.lr,
        match train.router_lr_scale {
            1.0 => String::new(),
            k => format!(" (routers ×{k})"),
        },
        train.warmup_steps,
        train.batch_size,
        model.context,
        model.dropout,
        model.init,
        train.steps,
        match train.target_ramp {
            0.0 => String::new(),
            r => format!(
                ", target ramped from α 1 over {:.0}% of training",
                100.0 * r
            ),
        },
        match train.skip_halted {
            true => ", halted tokens skip the FFN in training",
            false => "",
        }
    );
    let start = match &args.init_from {
        None => Start::Fresh,
        Some(path) if path.extension().is_some_and(|e| e == "safetensors") => {
            let bytes =
                std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
            let ad = device.clone().autodiff();
            Start::Weights(Box::new(
                tsa_core::export::from_safetensors(&bytes, &ad)
                    .with_context(|| format!("{}", path.display()))?
                    .0,
            ))
        }
        Some(path) => Start::Weights(Box::new(
            crate::args::load_checkpoint(path, &device.clone().autodiff())?.0,
        )),
    };
    Ok(Plan {
        label: model.routing.label(),
        data,
        source,
        model,
        train,
        eval_every: recipe.eval_every,
        eval_batches: recipe.eval_batches,
        start,
    })
}

/// A stopped run, from its training state at `path`.
fn resumed(args: &TrainArgs, path: &Path, device: &Device) -> Result<Plan> {
    let (r, so_far) = read_state(path, device)?;
    if r.trainer.step >= r.trainer.config.steps {
        anyhow::bail!(
            "{}: the run is complete ({} of {} steps); nothing to resume",
            path.display(),
            r.trainer.step,
            r.trainer.config.steps
        );
    }
    let (model, train) = (r.meta.config.clone(), r.trainer.config.clone());
    let data = match (so_far.task, &r.meta.vocab) {
        (Some(task), _) => Data::Task(TaskSet::generate(
            task,
            TASK_EXAMPLES.0,
            TASK_EXAMPLES.1,
            train.seed,
        )),
        (None, Some(vocab)) => {
            // The corpus it trained on, unless another path to it is given.
            let given = args.corpus.clone().or_else(|| so_far.corpus.clone());
            let (corpus, text) = read_corpus(given.as_ref())?;
            if so_far.corpus_crc != Some(crc32fast::hash(&text)) {
                anyhow::bail!(
                    "{} is not the corpus this run trained on (its checksum differs); pass that one with --corpus",
                    corpus.display()
                );
            }
            Data::Lm(corpus_from(&corpus, &text, vocab.clone(), model.context)?)
        }
        (None, None) => anyhow::bail!(
            "{}: the state has neither a task nor a vocabulary",
            path.display()
        ),
    };
    eprintln!(
        "resuming {} at step {} of {} ({:.0} s trained so far)",
        so_far.label, r.trainer.step, train.steps, so_far.seconds
    );
    Ok(Plan {
        label: so_far.label.clone(),
        data,
        source: Source {
            vocab: r.meta.vocab,
            task: so_far.task,
            corpus: so_far.corpus.clone(),
            corpus_crc: so_far.corpus_crc,
        },
        model,
        train,
        eval_every: so_far.eval_every,
        eval_batches: so_far.eval_batches,
        start: Start::Resume {
            trainer: Box::new(r.trainer),
            so_far,
        },
    })
}

pub fn main(args: &TrainArgs) -> Result<()> {
    let chosen = device::choose(args.device)?;
    eprintln!("device: {}", chosen.name);
    let plan = match &args.resume {
        Some(path) => resumed(args, path, &chosen.device)?,
        None => fresh(args, &chosen.device)?,
    };
    let (model, train) = (plan.model.clone(), plan.train.clone());
    let (at, prior) = match &plan.start {
        Start::Resume { trainer, so_far } => (trainer.step, Some(so_far)),
        _ => (0, None),
    };
    if let Some(k) = args.stop_at
        && (k <= at || k >= train.steps)
    {
        anyhow::bail!(
            "--stop-at {k} must be after the run's step {at} and before its last step {}",
            train.steps
        );
    }
    let files = args.files(prior);
    // What the run reads is never what it writes, nor are two of its outputs one file; and a
    // path it cannot write is refused now, not after hours of training.
    let mut inputs: Vec<(&str, &Path)> = Vec::new();
    if let Some(corpus) = &plan.source.corpus {
        inputs.push(("corpus", corpus));
    }
    if let Some(init) = &args.init_from {
        inputs.push(("--init-from file", init));
    }
    let mut outputs: Vec<(&str, &Path)> = vec![
        ("--out", &files.out),
        ("--log", &files.log),
        ("--state", &files.state),
    ];
    if let Some(windows) = &args.windows_out {
        outputs.push(("--windows-out", windows));
    }
    crate::args::check_outputs(&inputs, &outputs)?;
    // A stopped run's state is not overwritten by a new run (it would be lost): resume it, or
    // remove it first.
    let resumed_from = args.resume.as_deref().map(crate::args::identity);
    if files.state.exists() && resumed_from != Some(crate::args::identity(&files.state)) {
        anyhow::bail!(
            "{} holds a stopped run's training state: continue it with `native-bench train --resume {}`, or delete it to start afresh",
            files.state.display(),
            files.state.display()
        );
    }
    if let Some(path) = &args.windows_out {
        let Data::Lm(corpus) = &plan.data else {
            anyhow::bail!("--windows-out records a corpus's windows; a synthetic task has none");
        };
        let log = corpus.window_log(
            train.steps,
            train.batch_size,
            model.context,
            train.seed,
            plan.eval_batches,
        );
        write_atomically(path, serde_json::to_string(&log)?.as_bytes())?;
    }
    let out = StateOut {
        path: files.state.clone(),
        stop_at: args.stop_at,
        source: plan.source.clone(),
        out: Some(absolute(&files.out)),
        log: Some(absolute(&files.log)),
    };
    stop_on_ctrl_c();
    let r = run(
        &plan.label,
        &plan.data,
        &model,
        &train,
        plan.eval_every,
        plan.eval_batches,
        &chosen.device,
        plan.start,
        &out,
    )?;

    let meta = CheckpointMeta {
        config: model.clone(),
        vocab: plan.source.vocab,
        step: r.step,
    };
    let bytes = block_on(checkpoint::to_bytes(&r.model, &meta))?;
    // (The log is written by `run` at every evaluation, the last included.)
    write_atomically(&files.out, &bytes)?;
    println!(
        "{}: {} params, {:.0} s; val loss {:.4} (bpc {:.3}), soft α {:.3}, accuracy {:.4}{}\ncheckpoint {}  log {}",
        plan.label,
        r.params,
        r.seconds,
        r.last.loss,
        r.last.bpc,
        r.last.alpha,
        r.last.accuracy,
        r.hard.as_ref().map_or(String::new(), |h| format!(
            "\nexecuted (p ≤ 0.5 runs): val loss {:.4} (bpc {:.3}), α {:.3}, TLOps saved {:.1}%",
            h.loss,
            h.bpc,
            h.alpha,
            100.0 * h.tlops_saved
        )),
        files.out.display(),
        files.log.display()
    );
    if let Some(e) = r.diverged {
        // The run is over: its state would only replay the same steps into the same NaN.
        remove_if_there(&out.path)?;
        anyhow::bail!(
            "{e}: the model of step {} (the last good one) is in {}, its log in {}",
            r.step,
            files.out.display(),
            files.log.display()
        );
    }
    match r.stopped_at {
        Some(k) => {
            let stopped = format!(
                "stopped at step {k} of {}; training state {}\ncontinue: native-bench train --resume {}",
                train.steps,
                out.path.display(),
                out.path.display()
            );
            // `--stop-at` asked for this stop; a signal did not (exit 130, see `Interrupted`).
            if interrupted() {
                return Err(Interrupted(stopped).into());
            }
            println!("{stopped}");
        }
        // Complete: the state (this run's, or the one it resumed) has served its purpose.
        None => remove_if_there(&out.path)?,
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        train: TrainArgs,
    }

    fn parse(args: &[&str]) -> TrainArgs {
        Cli::try_parse_from(std::iter::once("train").chain(args.iter().copied()))
            .expect("valid flags")
            .train
    }

    #[test]
    fn flags_override_only_their_part_of_the_recipe() {
        let quick = parse(&["--recipe", "quick"]).recipe(65);
        let mut want = Recipe::quick_lm(65, Routing::tsa(0.001));
        want.train.seed = 1337;
        assert_eq!(quick, want);
        let r = parse(&[
            "--recipe",
            "quick",
            "--d-model",
            "64",
            "--lr",
            "1e-3",
            "--dropout",
            "0.2",
        ])
        .recipe(65);
        assert_eq!(
            (r.model.d_model, r.model.n_layers, r.model.context),
            (64, 6, 64)
        );
        assert_eq!(
            (r.train.lr, r.train.steps, r.model.dropout),
            (1e-3, 600, 0.2)
        );
        // The default is the paper's recipe.
        let paper = parse(&[]).recipe(65);
        assert_eq!(
            (paper.name, paper.model.d_model, paper.train.warmup_steps),
            ("paper", 256, 0)
        );
        assert_eq!(paper.model.dropout, 0.1);
    }

    #[test]
    fn gate_and_target_reach_the_routing() {
        let a = parse(&[
            "--gate",
            "straight-through",
            "--target",
            "0.4",
            "--lambda",
            "0",
        ]);
        assert_eq!(
            a.routing(),
            Routing::Tsa {
                lambda: 0.0,
                gate: TsaGate::StraightThrough,
                target: Some(0.4),
                commit: 0.0,
            }
        );
        assert!(a.recipe(65).model.validate().is_ok());
        let bad = parse(&["--target", "1.5"]).recipe(65);
        assert!(bad.model.validate().is_err(), "a target above 1 is refused");
        assert!(parse(&["--router-bias", "-3"]).recipe(65).model.router_bias == -3.0);
    }
}
