//! Trains a small TSA model on Tiny-Shakespeare on the CPU, printing loss, soft α and executed α
//! as it goes, then compares soft gating with sparse inference (kept tokens scaled by 1 − p, or by 1).
//!
//! `cargo run --release -p tsa-core --example train -- [--steps N] [--dense] [--lambda λ] [--corpus PATH]`

use std::time::Instant;

use rand::SeedableRng;
use rand::rngs::StdRng;
use tsa_core::data::{Corpus, Split};
use tsa_core::read::block_on;
use tsa_core::{Execution, KeepScale, Routing, TrainConfig, Trainer, TsaConfig, evaluate};

fn main() {
    if let Err(e) = run() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn arg<T: std::str::FromStr>(args: &[String], name: &str) -> Result<Option<T>, String> {
    match args.iter().position(|a| a == name) {
        None => Ok(None),
        Some(i) => {
            let v = args.get(i + 1).ok_or(format!("{name} needs a value"))?;
            v.parse()
                .map(Some)
                .map_err(|_| format!("{name}: cannot parse {v:?}"))
        }
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let steps: usize = arg(&args, "--steps")?.unwrap_or(600);
    let lambda: f64 = arg(&args, "--lambda")?.unwrap_or(0.001);
    let path: String = arg(&args, "--corpus")?
        .or_else(|| std::env::var("TSA_CORPUS").ok())
        .unwrap_or_else(|| "data/tinyshakespeare.txt".into());
    let routing = if args.iter().any(|a| a == "--dense") {
        Routing::Dense
    } else {
        Routing::tsa(lambda)
    };

    let bytes = std::fs::read(&path).map_err(|e| format!("cannot read corpus {path}: {e}"))?;
    let corpus = Corpus::from_bytes(&bytes, 64)?;
    let model_cfg = TsaConfig::tiny(corpus.tokenizer.vocab_size(), routing);
    let train = TrainConfig::new()
        .with_lr(2e-3)
        .with_warmup_steps(50)
        .with_steps(steps)
        .with_batch_size(16);
    let device = burn::tensor::Device::flex();
    let mut trainer = Trainer::new(&model_cfg, train.clone(), &device)?;
    let ad = trainer.model.device();
    println!(
        "tsa demo: {} on {} chars ({} distinct), d={} L={} H={} ctx={}, {} params, {} steps on the CPU (flex)",
        routing.label(),
        corpus.len(),
        corpus.tokenizer.vocab_size(),
        model_cfg.d_model,
        model_cfg.n_layers,
        model_cfg.n_heads,
        model_cfg.context,
        burn::module::Module::num_params(&trainer.model),
        steps
    );

    let ctx = model_cfg.context;
    let val = corpus.eval_batches(8, 16, ctx, &device);
    let mut rng = StdRng::seed_from_u64(train.seed);
    let start = Instant::now();
    for s in 0..steps {
        let batch = corpus.batch(Split::Train, train.batch_size, ctx, &mut rng, &ad);
        let stats = block_on(trainer.step(&batch))?;
        if s % 50 == 0 || s + 1 == steps {
            let ev = block_on(evaluate(&trainer.inference_model(), &val, Execution::Soft))?;
            println!(
                "step {:>5}  loss {:.4}  val {:.4} (bpc {:.3})  soft α {:.3}  executed α {:.3} (TLOps saved {:>5.1}%)  {:.1} steps/s",
                stats.step,
                stats.task_loss,
                ev.loss,
                ev.bpc,
                ev.alpha,
                ev.executed_alpha,
                100.0 * ev.executed_tlops_saved,
                stats.step as f64 / start.elapsed().as_secs_f64()
            );
        }
    }
    if routing.has_routers() {
        let model = trainer.inference_model();
        println!(
            "\nvalidation, soft gates vs sparse inference (tokens with p > 0.5 skip the FFN):"
        );
        for (name, exec) in [
            ("soft (training gates)", Execution::Soft),
            (
                "sparse, kept × (1 − p)",
                Execution::Sparse(KeepScale::OneMinusP),
            ),
            ("sparse, kept × 1", Execution::Sparse(KeepScale::One)),
        ] {
            let ev = block_on(evaluate(&model, &val, exec))?;
            let alphas = if exec == Execution::Soft {
                // The soft forward runs every block; the rule would run executed α of them.
                format!(
                    "soft α {:.3}  executed α {:.3}",
                    ev.alpha, ev.executed_alpha
                )
            } else {
                format!("executed α {:.3}", ev.executed_alpha)
            };
            println!(
                "  {name:<24} val loss {:.4}  {alphas}  (TLOps saved {:.1}%)",
                ev.loss,
                100.0 * ev.executed_tlops_saved
            );
        }
    }
    Ok(())
}
