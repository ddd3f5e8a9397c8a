//! `train`: any routing variant on a corpus or a synthetic task, with a progress bar, periodic
//! evaluation, a checkpoint and a JSON log. `reproduce` runs its arms through [`run`].

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result};
use burn::tensor::Device;
use clap::{Args, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use rand::SeedableRng;
use rand::rngs::StdRng;
use serde::Serialize;
use tsa_core::checkpoint::{self, CheckpointMeta};
use tsa_core::data::tasks::{Task, TaskSet};
use tsa_core::data::{Batch, Corpus, Split};
use tsa_core::read::block_on;
use tsa_core::{
    EvalStats, Execution, Routing, TrainConfig, Trainer, TsaConfig, TsaModel, evaluate,
};

use crate::args::ShapeArgs;
use crate::device::{self, DeviceChoice};

#[derive(Debug, Clone, Copy, PartialEq, ValueEnum)]
pub enum Variant {
    Dense,
    Tsa,
    EarlyExit,
    Mod,
}

#[derive(Debug, Clone, Copy, PartialEq, ValueEnum)]
pub enum TaskArg {
    Copy,
    Sort,
}

#[derive(Args, Debug, Clone)]
pub struct TrainArgs {
    #[arg(long, value_enum, default_value = "tsa")]
    pub routing: Variant,
    /// TSA depth-loss weight λ.
    #[arg(long, default_value_t = 0.001)]
    pub lambda: f64,
    /// MoD capacity (share of each sequence a routed block processes).
    #[arg(long, default_value_t = 0.75)]
    pub capacity: f64,
    /// Train on a synthetic task instead of a corpus.
    #[arg(long, value_enum)]
    pub task: Option<TaskArg>,
    /// Any UTF-8 text (default: Tiny-Shakespeare from $TSA_CORPUS or data/tinyshakespeare.txt).
    #[arg(long)]
    pub corpus: Option<PathBuf>,
    #[command(flatten)]
    pub shape: ShapeArgs,
    #[arg(long, default_value_t = 128)]
    pub context: usize,
    #[arg(long, default_value_t = 5000)]
    pub steps: usize,
    #[arg(long, default_value_t = 64)]
    pub batch: usize,
    #[arg(long, default_value_t = 1e-3)]
    pub lr: f64,
    #[arg(long, default_value_t = 100)]
    pub warmup: usize,
    #[arg(long, default_value_t = 1337)]
    pub seed: u64,
    /// Evaluate every this many steps.
    #[arg(long, default_value_t = 250)]
    pub eval_every: usize,
    /// Validation batches per evaluation.
    #[arg(long, default_value_t = 8)]
    pub eval_batches: usize,
    #[arg(long, value_enum, default_value = "auto")]
    pub device: DeviceChoice,
    /// Checkpoint out (loadable by the web app and by `--checkpoint` elsewhere).
    #[arg(long, default_value = "results/model.tsa")]
    pub out: PathBuf,
    /// JSON log: one line per evaluation.
    #[arg(long, default_value = "results/train-log.jsonl")]
    pub log: PathBuf,
}

impl TrainArgs {
    pub fn routing(&self) -> Routing {
        match self.routing {
            Variant::Dense => Routing::Dense,
            Variant::Tsa => Routing::Tsa {
                lambda: self.lambda,
            },
            Variant::EarlyExit => Routing::EarlyExit,
            Variant::Mod => Routing::MixtureOfDepths {
                capacity: self.capacity,
            },
        }
    }
}

/// Where batches come from.
pub enum Data {
    Lm(Corpus),
    Task(TaskSet),
}

impl Data {
    pub fn vocab_size(&self) -> usize {
        match self {
            Data::Lm(c) => c.tokenizer.vocab_size(),
            Data::Task(_) => tsa_core::data::tasks::VOCAB_SIZE,
        }
    }

    fn train_batch(&self, batch: usize, ctx: usize, rng: &mut StdRng, device: &Device) -> Batch {
        match self {
            Data::Lm(c) => {
                let (x, y) = c.sample(Split::Train, batch, ctx, rng);
                Batch::new(x, y, None, ctx, device)
            }
            Data::Task(t) => {
                let (x, y, m) = t.sample(batch, rng);
                Batch::new(x, y, Some(m), tsa_core::data::tasks::SEQ_LEN, device)
            }
        }
    }

    /// Fixed evaluation batches: seeded validation windows, or the whole held-out task set.
    pub fn eval_set(&self, n: usize, batch: usize, ctx: usize, device: &Device) -> Vec<Batch> {
        match self {
            Data::Lm(c) => c
                .eval_windows(Split::Val, n, batch, ctx, 4242)
                .into_iter()
                .map(|(x, y)| Batch::new(x, y, None, ctx, device))
                .collect(),
            Data::Task(t) => t
                .test
                .chunks(100)
                .map(|rows| {
                    let (x, y, m) = TaskSet::rows(rows);
                    Batch::new(x, y, Some(m), tsa_core::data::tasks::SEQ_LEN, device)
                })
                .collect(),
        }
    }
}

pub fn load_corpus(path: Option<&PathBuf>, context: usize) -> Result<Corpus> {
    let path = path
        .cloned()
        .or_else(|| std::env::var_os("TSA_CORPUS").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("data/tinyshakespeare.txt"));
    let bytes = std::fs::read(&path).with_context(|| format!("cannot read corpus {} (run scripts/demo once to fetch Tiny-Shakespeare, or pass --corpus)", path.display()))?;
    Corpus::from_bytes(&bytes, context).with_context(|| format!("corpus {}", path.display()))
}

#[derive(Debug, Clone, Serialize)]
pub struct EvalPoint {
    pub step: usize,
    pub train_loss: f32,
    pub val_loss: f64,
    pub bpc: f64,
    pub alpha: f64,
    pub tlops_saved: f64,
    pub accuracy: f64,
    pub tokens_per_s: f64,
}

pub struct RunResult {
    pub model: TsaModel,
    pub curve: Vec<EvalPoint>,
    pub last: EvalStats,
    pub params: usize,
    pub seconds: f64,
}

/// Trains one model and evaluates it every `eval_every` steps (and at the end).
pub fn run(
    label: &str,
    data: &Data,
    model: &TsaConfig,
    train: &TrainConfig,
    eval_every: usize,
    eval_batches: usize,
    device: &Device,
) -> Result<RunResult> {
    let mut trainer = Trainer::new(model, train.clone(), device)?;
    let ad = trainer.model.tok_emb.weight.val().device();
    let eval = data.eval_set(eval_batches, train.batch_size, model.context, device);
    let mut rng = StdRng::seed_from_u64(train.seed);
    let pb = ProgressBar::new(train.steps as u64);
    pb.set_style(
        ProgressStyle::with_template("{prefix} [{bar:25}] {pos}/{len} {msg} eta {eta}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    pb.set_prefix(label.to_string());
    let start = Instant::now();
    let mut curve = Vec::new();
    let mut last = None;
    for s in 0..train.steps {
        let batch = data.train_batch(train.batch_size, model.context, &mut rng, &ad);
        let st =
            block_on(trainer.step(&batch)).with_context(|| format!("{label}: training stopped"))?;
        let tps = (st.step * batch.inputs.dims().iter().product::<usize>()) as f64
            / start.elapsed().as_secs_f64();
        pb.set_message(format!(
            "loss {:.3} α {:.3} {:.0} tok/s",
            st.task_loss, st.alpha, tps
        ));
        pb.inc(1);
        if st.step % eval_every == 0 || s + 1 == train.steps {
            let ev = block_on(evaluate(
                &trainer.inference_model(),
                &eval,
                Execution::Train,
            ))?;
            curve.push(EvalPoint {
                step: st.step,
                train_loss: st.task_loss,
                val_loss: ev.loss,
                bpc: ev.bpc,
                alpha: ev.alpha,
                tlops_saved: ev.tlops_saved,
                accuracy: ev.accuracy,
                tokens_per_s: tps,
            });
            pb.println(format!(
                "{label} step {:>5}: val {:.4} (bpc {:.3}) α {:.3} TLOps saved {:.1}% acc {:.4}",
                st.step,
                ev.loss,
                ev.bpc,
                ev.alpha,
                100.0 * ev.tlops_saved,
                ev.accuracy
            ));
            last = Some(ev);
        }
    }
    pb.finish_and_clear();
    let model_out = trainer.inference_model();
    let params = burn::module::Module::num_params(&model_out);
    Ok(RunResult {
        model: model_out,
        curve,
        last: last.context("no evaluation ran")?,
        params,
        seconds: start.elapsed().as_secs_f64(),
    })
}

pub fn main(args: &TrainArgs) -> Result<()> {
    let chosen = device::choose(args.device)?;
    eprintln!("device: {}", chosen.name);
    let (data, context, vocab) = match args.task {
        Some(t) => {
            let task = if t == TaskArg::Copy {
                Task::Copy
            } else {
                Task::Sort
            };
            (
                Data::Task(TaskSet::generate(task, 10_000, 1_000, args.seed)),
                64,
                None,
            )
        }
        None => {
            let c = load_corpus(args.corpus.as_ref(), args.context)?;
            let tok = c.tokenizer.clone();
            (Data::Lm(c), args.context, Some(tok))
        }
    };
    let model = args
        .shape
        .apply(TsaConfig::new(data.vocab_size()))
        .with_context(context)
        .with_routing(args.routing());
    let train = TrainConfig::new()
        .with_lr(args.lr)
        .with_warmup_steps(args.warmup)
        .with_steps(args.steps)
        .with_batch_size(args.batch)
        .with_seed(args.seed);
    let r = run(
        &model.routing.label(),
        &data,
        &model,
        &train,
        args.eval_every.max(1),
        args.eval_batches.max(1),
        &chosen.device,
    )?;

    if let Some(dir) = args.out.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let meta = CheckpointMeta {
        config: model.clone(),
        vocab,
        step: train.steps,
    };
    let bytes = block_on(checkpoint::to_bytes(&r.model, &meta))?;
    std::fs::write(&args.out, bytes)
        .with_context(|| format!("cannot write {}", args.out.display()))?;
    if let Some(dir) = args.log.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&args.log, crate::report::json_lines(&r.curve)?)?;
    println!(
        "{}: {} params, {:.0} s; val loss {:.4} (bpc {:.3}), α {:.3}, TLOps saved {:.1}%, accuracy {:.4}\ncheckpoint {}  log {}",
        model.routing.label(),
        r.params,
        r.seconds,
        r.last.loss,
        r.last.bpc,
        r.last.alpha,
        100.0 * r.last.tlops_saved,
        r.last.accuracy,
        args.out.display(),
        args.log.display()
    );
    Ok(())
}
