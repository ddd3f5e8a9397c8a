//! Training with halted tokens skipping the FFN (`TrainConfig::skip_halted`): the same forward
//! values as masking, the same FFN gradients, real skipped rows, and a clear refusal where a gate
//! halts nothing outright.

use burn::module::ParamId;
use burn::optim::GradientsParams;
use burn::tensor::Device;
use tsa_core::{
    Execution, Routing, TrainConfig, Trainer, TsaGate, TsaModel, loss, metrics, sparse,
};

use crate::common::*;
use crate::gates::{rows, shifted_batch};

fn tsa(gate: TsaGate) -> Routing {
    Routing::Tsa {
        lambda: 0.0,
        gate,
        target: Some(0.5),
        commit: 0.0,
    }
}

/// One training forward and backward: logits, the executed α, and the gradients.
fn pass(m: &TsaModel, skip_halted: bool, device: &Device) -> (Vec<f32>, f32, GradientsParams) {
    let x = tokens(&rows(2, 12, 10, 1), device);
    let out = m.forward(
        x,
        Execution::Train {
            progress: 0.5,
            skip_halted,
        },
    );
    let executed = floats(metrics::executed_alpha(&out.halting).expect("routed"))[0];
    let logits = out.logits.clone();
    let mut total = loss::cross_entropy(out.logits, tokens(&rows(2, 12, 10, 2), device), None);
    if let Some(aux) = out.router_aux {
        total = total + aux;
    }
    let grads = GradientsParams::from_grads(total.backward(), m);
    (floats(logits), executed, grads)
}

/// The gradient of parameter `id` as `n` floats: zeros where the pass never used it (a block
/// that every token skipped).
fn grad(grads: &GradientsParams, id: ParamId, n: usize) -> Vec<f32> {
    grads
        .get::<2>(id)
        .map(floats)
        .unwrap_or_else(|| vec![0.0; n])
}

#[test]
fn skipping_halted_tokens_changes_no_value_and_no_ffn_gradient() {
    let device = cpu().autodiff();
    for routing in [
        tsa(TsaGate::StraightThrough),
        tsa(TsaGate::StraightThroughScaled),
        Routing::MixtureOfDepths { capacity: 0.5 },
    ] {
        let mod_ = matches!(routing, Routing::MixtureOfDepths { .. });
        // MoD's top-k halts half of every sequence by itself; steep routers (halting_some)
        // would give some chosen tokens a weight 1 − p of exactly 0.
        let m = match mod_ {
            true => model(&micro(10, routing), 9, &device),
            false => halting_some_on(micro(10, routing), &device),
        };
        let (masked, executed, masked_grads) = pass(&m, false, &device);
        assert!(
            mod_ || (executed > 0.05 && executed < 0.95),
            "{routing:?}: the test needs kept and halted tokens, executed α = {executed}"
        );
        let reads = sparse::host_reads();
        let (skipped, _, skipped_grads) = pass(&m, true, &device);
        assert!(
            sparse::host_reads() >= reads + m.config.n_routers(),
            "{routing:?}: every routed block gathers its kept rows"
        );
        let diff = max_abs_diff(&masked, &skipped);
        assert!(diff < 1e-5, "{routing:?}: logits differ by {diff}");
        // The FFN of a halted token was multiplied by 0, so its weights learn the same either
        // way — exactly so for the last block, whose output reaches no router. Earlier blocks
        // feed the routers, whose gradient changes for TSA's gates (below).
        let last = m.blocks.len() - 1;
        for (l, block) in m.blocks.iter().enumerate().skip(1) {
            for w in [&block.ffn.fc.weight, &block.ffn.proj.weight] {
                let n = w.shape().num_elements();
                let d = max_abs_diff(
                    &grad(&masked_grads, w.id, n),
                    &grad(&skipped_grads, w.id, n),
                );
                if l == last || mod_ {
                    assert!(
                        d < 1e-6,
                        "{routing:?}: block {l}'s FFN gradient differs by {d}"
                    );
                }
            }
        }
        // The routers: MoD's gate had no gradient through unchosen tokens anyway; TSA's
        // straight-through gates lose the halted tokens' FFN term (what the option trades).
        // Relative to the gradient's size: halting_some's routers are steep, their σ′ small.
        let router_diff = m
            .routers
            .iter()
            .map(|r| {
                let (id, n) = (r.out.weight.id, r.out.weight.shape().num_elements());
                let (a, b) = (grad(&masked_grads, id, n), grad(&skipped_grads, id, n));
                max_abs_diff(&a, &b) / a.iter().fold(1e-12_f32, |m, x| m.max(x.abs()))
            })
            .fold(0.0, f32::max);
        match mod_ {
            true => assert!(router_diff < 1e-4, "MoD: {router_diff}"),
            false => assert!(
                router_diff > 1e-2,
                "{routing:?}: the routers' gradient should lose the skipped FFN term ({router_diff})"
            ),
        }
    }
}

#[test]
fn skip_halted_is_refused_where_no_token_halts_outright() {
    let skip = TrainConfig::new().with_skip_halted(true);
    for routing in [Routing::Dense, Routing::EarlyExit, Routing::tsa(0.001)] {
        let err = skip.validate_for(&routing).expect_err("nothing to skip");
        assert!(err.to_string().contains("skip_halted"), "{err}");
        assert!(Trainer::new(&micro(10, routing), skip.clone(), &cpu()).is_err());
    }
    for routing in [
        tsa(TsaGate::StraightThrough),
        tsa(TsaGate::Gumbel),
        Routing::MixtureOfDepths { capacity: 0.5 },
    ] {
        assert!(skip.validate_for(&routing).is_ok(), "{routing:?}");
    }
}

#[test]
fn a_trainer_that_skips_halted_tokens_learns() {
    let cfg = micro(10, tsa(TsaGate::StraightThroughScaled));
    let train = TrainConfig::new()
        .with_steps(30)
        .with_batch_size(2)
        .with_lr(3e-3)
        .with_warmup_steps(0)
        .with_skip_halted(true);
    let mut trainer = Trainer::new(&cfg, train, &cpu()).expect("a valid config");
    let device = trainer.model.device();
    let batch = shifted_batch(&device);
    let reads = sparse::host_reads();
    let first = tsa_core::read::block_on(trainer.step(&batch)).expect("a step");
    let mut last = first;
    for _ in 1..30 {
        last = tsa_core::read::block_on(trainer.step(&batch)).expect("a step");
    }
    assert!(sparse::host_reads() >= reads + 30 * cfg.n_routers());
    assert!(
        last.task_loss < first.task_loss - 0.5,
        "one batch, 30 steps: {} → {}",
        first.task_loss,
        last.task_loss
    );
}
