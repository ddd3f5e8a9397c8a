//! `sample --checkpoint F`: generate text with the KV cache, soft (every block runs) vs sparse
//! (halted tokens skip their blocks), with tokens/s and the routing shown in colour.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Result, bail};
use clap::Args;
use rand::SeedableRng;
use rand::rngs::StdRng;
use tsa_core::Execution;
use tsa_core::generate::generate;
use tsa_core::read::block_on;

use crate::args::load_checkpoint;
use crate::device::{self, DeviceChoice};

#[derive(Args, Debug, Clone)]
pub struct SampleArgs {
    #[arg(long)]
    pub checkpoint: PathBuf,
    #[arg(long, default_value = "ROMEO:\n")]
    pub prompt: String,
    #[arg(long, default_value_t = 200)]
    pub chars: usize,
    /// Softmax temperature; 0 samples greedily (the most likely character).
    #[arg(long, default_value_t = 0.8, value_parser = crate::args::non_negative)]
    pub temperature: f64,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    #[arg(long, value_enum, default_value = "cpu")]
    pub device: DeviceChoice,
}

/// Background colour from green (every block ran) to red (halted everywhere).
fn paint(ch: char, active: f32, colour: bool) -> String {
    let shown = match ch {
        '\n' => "⏎\n".to_string(),
        c => c.to_string(),
    };
    if !colour {
        return shown;
    }
    let a = active.clamp(0.0, 1.0);
    let (r, g) = ((255.0 * (1.0 - a)) as u8, (200.0 * a) as u8);
    format!("\x1b[48;2;{r};{g};60m\x1b[38;2;255;255;255m{shown}\x1b[0m")
}

fn mode(sparse: bool, routed: bool) -> &'static str {
    match (sparse, routed) {
        (true, true) => "sparse-TSA",
        // A dense or early-exit checkpoint has no routers: both modes run every block.
        (true, false) => "sparse (no routers: all blocks)",
        (false, _) => "soft (all blocks)",
    }
}

pub fn main(args: &SampleArgs) -> Result<()> {
    let chosen = device::choose(args.device)?;
    let (model, meta) = load_checkpoint(&args.checkpoint, &chosen.device)?;
    let Some(tok) = meta.vocab else {
        bail!("this checkpoint has no character vocabulary (a synthetic-task model)")
    };
    if args.prompt.is_empty() {
        bail!("--prompt is empty: generation continues a text of at least one character");
    }
    let prompt = tok.encode(&args.prompt)?;
    let routed = model.config.routing.has_routers();
    let colour = std::io::stdout().is_terminal();
    println!(
        "{} on {}, {} characters after {:?} (each mode warmed up untimed first)\n",
        model.config.routing.label(),
        chosen.name,
        args.chars,
        args.prompt
    );
    let run = |sparse: bool, n: usize| {
        let exec = match sparse {
            true => Execution::Sparse(model.config.routing.keep_scale()),
            false => Execution::Soft,
        };
        let mut rng = StdRng::seed_from_u64(args.seed);
        block_on(generate(
            &model,
            &prompt,
            n,
            args.temperature,
            exec,
            &mut rng,
        ))
    };
    // Untimed, both modes first: on a GPU each new shape compiles (and autotunes) its kernels on
    // first use, which would otherwise be billed to whichever mode ran first. A context's worth
    // and one more sees every cache length and a roll-over.
    // Its time is shown: what a first generation costs on this device.
    for sparse in [false, true] {
        let t0 = Instant::now();
        run(sparse, model.config.context + 1)?;
        println!(
            "warm-up, {}: {} tokens in {:.2} s",
            mode(sparse, routed),
            model.config.context + 1,
            t0.elapsed().as_secs_f64()
        );
    }
    println!();
    for sparse in [false, true] {
        let t0 = Instant::now();
        let g = run(sparse, args.chars)?;
        let secs = t0.elapsed().as_secs_f64();
        let text = tok.decode(&g.tokens)?;
        let painted: String = text
            .chars()
            .zip(&g.halting)
            .map(|(c, p)| {
                let active = if p.is_empty() {
                    1.0
                } else {
                    p.iter()
                        .map(|&p| {
                            if sparse {
                                f32::from(u8::from(p <= 0.5))
                            } else {
                                1.0 - p
                            }
                        })
                        .sum::<f32>()
                        / p.len() as f32
                };
                paint(c, active, colour)
            })
            .collect::<String>();
        let painted = if g.halting.is_empty() {
            text.clone()
        } else {
            painted
        };
        println!(
            "── {} ({:.1} tokens/s, α {:.3})\n{}{}\n",
            mode(sparse, routed),
            args.chars as f64 / secs,
            g.alpha,
            args.prompt,
            painted
        );
    }
    Ok(())
}
