//! Executable routing (straight-through and Gumbel gates, the compute target), dropout, the
//! initialisation schemes, the executed-α diagnostics and the recipes.

use burn::module::Module;
use burn::optim::GradientsParams;
use burn::tensor::Tensor;
use tsa_core::data::Batch;
use tsa_core::read::block_on;
use tsa_core::{
    Execution, InitScheme, KeepScale, Recipe, Routing, TrainConfig, Trainer, TsaConfig, TsaGate,
    evaluate, metrics,
};

use crate::common::*;

fn gated(gate: TsaGate, target: Option<f64>) -> Routing {
    Routing::Tsa {
        lambda: 0.0,
        gate,
        target,
        commit: 0.0,
    }
}

fn halting_some(cfg: TsaConfig) -> tsa_core::TsaModel {
    halting_some_on(cfg, &cpu())
}

/// Rows of `n` random tokens below `vocab`.
pub fn rows(b: usize, n: usize, vocab: i32, seed: i32) -> Vec<Vec<i32>> {
    (0..b)
        .map(|r| {
            (0..n)
                .map(|i| (i as i32 * 7 + r as i32 * 3 + seed) % vocab)
                .collect()
        })
        .collect()
}

/// Two rows of 12 tokens and the next-token targets used across these tests.
pub fn shifted_batch(device: &burn::tensor::Device) -> Batch {
    Batch::new(
        rows(2, 12, 10, 0).concat(),
        rows(2, 12, 10, 1).concat(),
        None,
        12,
        device,
    )
}

#[test]
fn straight_through_trains_exactly_what_runs() {
    let device = cpu();
    let x = tokens(&rows(2, 12, 10, 1), &device);
    let m = halting_some(micro(10, gated(TsaGate::StraightThrough, None)));
    let run = m.forward(x.clone(), Execution::Hard(KeepScale::One));
    let executed = floats(metrics::executed_alpha(&run.halting).unwrap())[0];
    assert!(
        executed > 0.05 && executed < 0.95,
        "the test needs both kept and halted tokens, executed α = {executed}"
    );
    let train = m.forward(
        x.clone(),
        Execution::Train {
            progress: 0.5,
            skip_halted: false,
        },
    );
    let diff = max_abs_diff(&floats(train.logits), &floats(run.logits));
    assert!(
        diff < 1e-5,
        "training forward differs from the executed rule by {diff}"
    );
    // The gate's value is binary, and its α is the executed one.
    for a in &train.active {
        assert!(floats(a.clone()).iter().all(|&g| g == 0.0 || g == 1.0));
    }
    let trained_alpha = floats(metrics::alpha(&train.active).unwrap())[0];
    assert!((trained_alpha - executed).abs() < 1e-6);
    // ...and the routers still get a gradient (the soft gate's), kept or halted.
    let device = cpu().autodiff();
    let m = model(
        &micro(10, gated(TsaGate::StraightThrough, None)),
        3,
        &device,
    );
    let x = tokens(&rows(2, 12, 10, 1), &device);
    let train = m.forward(
        x,
        Execution::Train {
            progress: 0.5,
            skip_halted: false,
        },
    );
    let loss =
        tsa_core::loss::cross_entropy(train.logits, tokens(&rows(2, 12, 10, 2), &device), None);
    let grads = GradientsParams::from_grads(loss.backward(), &m);
    let g = grads
        .get::<2>(m.routers[0].out.weight.id)
        .expect("router weights get a gradient");
    assert!(floats(g.abs().sum())[0] > 0.0);
}

#[test]
fn straight_through_scaled_trains_what_sparse_runs_with_one_minus_p() {
    let device = cpu();
    let x = tokens(&rows(2, 12, 10, 1), &device);
    let m = halting_some(micro(10, gated(TsaGate::StraightThroughScaled, None)));
    assert_eq!(m.config.routing.keep_scale(), KeepScale::OneMinusP);
    let train = m.forward(
        x.clone(),
        Execution::Train {
            progress: 0.5,
            skip_halted: false,
        },
    );
    let run = m.forward(x.clone(), Execution::Sparse(KeepScale::OneMinusP));
    let executed = floats(metrics::executed_alpha(&run.halting).unwrap())[0];
    assert!(
        executed > 0.05 && executed < 0.95,
        "executed α = {executed}"
    );
    let diff = max_abs_diff(&floats(train.logits), &floats(run.logits));
    assert!(
        diff < 1e-4,
        "training forward differs from sparse inference by {diff}"
    );
    // Kept tokens get 1 − p, halted ones 0.
    for (a, p) in train.active.iter().zip(&train.halting) {
        for (g, p) in floats(a.clone()).into_iter().zip(floats(p.clone())) {
            let want = if p <= 0.5 { 1.0 - p } else { 0.0 };
            assert!((g - want).abs() < 1e-6, "gate {g} for p {p}");
        }
    }
}

#[test]
fn soft_gates_do_not_equal_their_threshold_but_hard_equals_sparse() {
    let cfg = micro(10, Routing::tsa(0.0)).with_router_bias(0.0);
    let m = model(&cfg, 4, &cpu());
    let x = tokens(&rows(2, 12, 10, 5), &cpu());
    let soft = floats(m.forward(x.clone(), Execution::Soft).logits);
    for scale in [KeepScale::OneMinusP, KeepScale::One] {
        let hard = floats(m.forward(x.clone(), Execution::Hard(scale)).logits);
        let sparse = floats(m.forward(x.clone(), Execution::Sparse(scale)).logits);
        assert!(
            max_abs_diff(&hard, &sparse) < 1e-4,
            "{scale:?}: hard ≠ sparse"
        );
        assert!(
            max_abs_diff(&hard, &soft) > 1e-4,
            "{scale:?}: the soft gate is not the rule"
        );
    }
}

#[test]
fn gumbel_is_noisy_in_training_binary_at_its_end_and_deterministic_in_evaluation() {
    let cfg = micro(10, gated(TsaGate::Gumbel, None)).with_router_bias(0.0);
    let device = cpu().autodiff();
    let m = model(&cfg, 6, &device);
    let x = tokens(&rows(2, 12, 10, 3), &device);
    let early = |seed| {
        device.seed(seed);
        floats(
            m.forward(
                x.clone(),
                Execution::Train {
                    progress: 0.1,
                    skip_halted: false,
                },
            )
            .active[0]
                .clone()
                .inner(),
        )
    };
    assert!(
        max_abs_diff(&early(1), &early(2)) > 1e-3,
        "the relaxation draws no noise"
    );
    assert!(
        early(1).iter().any(|&g| g > 0.01 && g < 0.99),
        "early in training the gate should be relaxed"
    );
    let late = m.forward(
        x.clone(),
        Execution::Train {
            progress: 0.9,
            skip_halted: false,
        },
    );
    for a in &late.active {
        assert!(
            floats(a.clone().inner())
                .iter()
                .all(|&g| g == 0.0 || g == 1.0)
        );
    }
    let eval = m.valid();
    let a = floats(eval.forward(x.clone().valid(), Execution::Soft).logits);
    let b = floats(
        eval.forward(x.valid(), Execution::Hard(KeepScale::One))
            .logits,
    );
    assert!(
        max_abs_diff(&a, &b) < 1e-5,
        "Gumbel evaluates as its inference rule"
    );
}

#[test]
fn executed_alpha_follows_the_threshold_and_the_histogram_sums_to_one() {
    for (bias, expected) in [(6.0, 0.0), (-6.0, 1.0)] {
        let cfg = micro(10, Routing::tsa(0.0)).with_router_bias(bias);
        let m = model(&cfg, 2, &cpu());
        let x = tokens(&rows(2, 12, 10, 0), &cpu());
        let batch = shifted_batch(&cpu());
        let s = block_on(evaluate(&m, &[batch], Execution::Soft)).unwrap();
        assert!(
            (s.executed_alpha - expected).abs() < 1e-6,
            "bias {bias}: {s:?}"
        );
        // The soft α is 1 − σ(bias)-ish, never the executed 0 or 1.
        assert!(s.alpha > 0.0 && s.alpha < 1.0);
        assert_eq!(s.p_histogram.len(), cfg.n_routers());
        for row in &s.p_histogram {
            assert!((row.iter().sum::<f64>() - 1.0).abs() < 1e-5, "{row:?}");
        }
        let hist =
            floats(metrics::halting_histogram(&m.forward(x, Execution::Soft).halting).unwrap());
        let top = if bias > 0.0 { 9 } else { 0 };
        assert!(
            hist[top] > 0.99,
            "bias {bias}: every p in one end bin, got {hist:?}"
        );
    }
}

#[test]
fn the_host_histogram_bins_read_probabilities_as_the_device_does() {
    let m = halting_some(micro(10, Routing::tsa(0.0)));
    let x = shifted_batch(&cpu()).inputs;
    let halting = m.forward(x, Execution::Soft).halting;
    let device = floats(metrics::halting_histogram(&halting).unwrap());
    for (l, p) in halting.iter().enumerate() {
        let host = metrics::histogram(&floats(p.clone()));
        for (k, share) in host.iter().enumerate() {
            let on_device = device[l * metrics::HIST_BINS + k] as f64;
            assert!(
                (share - on_device).abs() < 1e-6,
                "router {l} bin {k}: {host:?}"
            );
        }
    }
    assert_eq!(metrics::histogram(&[]), vec![0.0; metrics::HIST_BINS]);
    assert_eq!(
        metrics::histogram(&[1.0, 0.0])[9],
        0.5,
        "p = 1 falls in the top bin"
    );
}

#[test]
fn the_compute_target_raises_its_multiplier_while_too_much_runs() {
    let cfg = micro(10, gated(TsaGate::StraightThrough, Some(0.25))).with_router_bias(-4.0);
    let mut trainer = Trainer::new(
        &cfg,
        TrainConfig::new().with_steps(10).with_batch_size(2),
        &cpu(),
    )
    .unwrap();
    let device = trainer.model.device();
    let batch = shifted_batch(&device);
    let mut last = 0.0;
    for _ in 0..3 {
        let s = block_on(trainer.step(&batch)).unwrap();
        assert!(s.executed_alpha > 0.9, "σ(−4): nearly every token runs");
        assert!(
            s.mu > last,
            "μ must grow while executed α {} > 0.25",
            s.executed_alpha
        );
        last = s.mu;
    }
    // Without a target it stays 0.
    let mut plain = Trainer::new(
        &micro(10, Routing::tsa(0.0)),
        TrainConfig::new().with_batch_size(2),
        &cpu(),
    )
    .unwrap();
    assert_eq!(block_on(plain.step(&batch)).unwrap().mu, 0.0);
}

#[test]
fn a_ramped_target_starts_at_full_depth_and_reaches_the_requested_alpha() {
    let c = TrainConfig::new().with_steps(100).with_target_ramp(0.5);
    assert_eq!(c.target_at(0.4, 0), 1.0);
    assert!(
        (c.target_at(0.4, 25) - 0.7).abs() < 1e-12,
        "halfway down the ramp"
    );
    assert!((c.target_at(0.4, 50) - 0.4).abs() < 1e-12);
    assert!(
        (c.target_at(0.4, 99) - 0.4).abs() < 1e-12,
        "held after the ramp"
    );
    assert_eq!(
        TrainConfig::new().target_at(0.4, 0),
        0.4,
        "no ramp: α* at once"
    );
    assert!(TrainConfig::new().with_target_ramp(1.5).validate().is_err());
    assert!(
        TrainConfig::new()
            .with_target_ramp(-0.1)
            .validate()
            .is_err()
    );

    // In training: nearly every token runs (σ(−4)); on the ramp's first step the target is 1,
    // so μ does not rise, where the same step without a ramp raises it.
    let cfg = micro(10, gated(TsaGate::StraightThrough, Some(0.25))).with_router_bias(-4.0);
    let batch = shifted_batch(&cpu().autodiff());
    let mu_after_one_step = |ramp: f64| {
        let train = TrainConfig::new()
            .with_steps(10)
            .with_batch_size(2)
            .with_target_ramp(ramp);
        let mut trainer = Trainer::new(&cfg, train, &cpu()).unwrap();
        block_on(trainer.step(&batch)).unwrap().mu
    };
    assert!(mu_after_one_step(0.0) > 0.0);
    assert!(mu_after_one_step(1.0) <= 0.0);
}

#[test]
fn the_router_learning_rate_scale_moves_only_the_routers_faster() {
    // AdamW's first step moves each parameter by about lr (the update is g / |g|), so with the
    // routers' rate ×10 their step is ten times the unscaled run's and the blocks' are the same.
    let cfg = micro(10, gated(TsaGate::StraightThrough, Some(0.25)));
    let batch = shifted_batch(&cpu().autodiff());
    let one_step = |scale: f64| {
        let train = TrainConfig::new()
            .with_steps(10)
            .with_batch_size(2)
            .with_warmup_steps(0)
            .with_router_lr_scale(scale);
        let mut trainer = Trainer::new(&cfg, train, &cpu()).unwrap();
        let before = trainer.model.clone();
        block_on(trainer.step(&batch)).unwrap();
        let moved = |a: Vec<f32>, b: Vec<f32>| max_abs_diff(&a, &b);
        let bias = |m: &tsa_core::TsaModel| floats(m.routers[1].out.bias.as_ref().unwrap().val());
        let block =
            |m: &tsa_core::TsaModel| floats(m.blocks[1].ffn.fc.bias.as_ref().unwrap().val());
        (
            moved(bias(&before), bias(&trainer.model)),
            moved(block(&before), block(&trainer.model)),
        )
    };
    let (router1, block1) = one_step(1.0);
    let (router10, block10) = one_step(10.0);
    assert!(router1 > 0.0 && block1 > 0.0, "both groups learn");
    let ratio = router10 / router1;
    assert!((ratio - 10.0).abs() < 0.1, "router step ratio {ratio}");
    assert!(
        (block10 - block1).abs() <= 1e-6 * block1.max(1e-6),
        "{block10} vs {block1}"
    );
    for bad in [0.0, -1.0, f64::NAN] {
        assert!(
            TrainConfig::new()
                .with_router_lr_scale(bad)
                .validate()
                .is_err()
        );
    }
}

#[test]
fn the_commitment_term_is_beta_times_indecision_and_pushes_p_off_the_threshold() {
    let committed = |commit| Routing::Tsa {
        lambda: 0.0,
        gate: TsaGate::StraightThroughScaled,
        target: None,
        commit,
    };
    let m = halting_some(micro(10, committed(0.0)));
    let x = tokens(&rows(2, 12, 10, 0), &cpu());
    let y = tokens(&rows(2, 12, 10, 1), &cpu());
    let out = m.forward(x, Execution::Soft);
    let host: Vec<f64> = out
        .halting
        .iter()
        .flat_map(|p| floats(p.clone()))
        .map(|p| 4.0 * p as f64 * (1.0 - p as f64))
        .collect();
    let indecision = host.iter().sum::<f64>() / host.len() as f64;
    assert!(
        indecision > 0.05,
        "the test needs undecided routers: {indecision}"
    );
    let beta = 0.3;
    let obj = tsa_core::loss::objective(committed(beta), &out, y.clone(), None, 0.0);
    let extra = floats(obj.total - obj.task)[0] as f64;
    assert!(
        (extra - beta * indecision).abs() < 1e-5,
        "β·indecision {} vs objective's extra {extra}",
        beta * indecision
    );
    let plain = tsa_core::loss::objective(committed(0.0), &out, y, None, 0.0);
    assert_eq!(floats(plain.total - plain.task)[0], 0.0);

    // Trained with the commitment term outweighing the task, p leaves the threshold (from
    // σ(−0.5) ≈ 0.38: at exactly 0.5 its gradient 4σ'(z)(1 − 2p) vanishes).
    let cfg = micro(10, committed(50.0)).with_router_bias(-0.5);
    let mut trainer = Trainer::new(
        &cfg,
        TrainConfig::new()
            .with_steps(30)
            .with_batch_size(2)
            .with_lr(1e-2),
        &cpu(),
    )
    .unwrap();
    let batch = shifted_batch(&cpu());
    let undecided = |m: &tsa_core::TsaModel| {
        let halting = m.forward(batch.inputs.clone(), Execution::Soft).halting;
        floats(metrics::indecision(&halting).unwrap())[0]
    };
    let before = undecided(&trainer.inference_model());
    for _ in 0..30 {
        block_on(trainer.step(&batch)).unwrap();
    }
    let after = undecided(&trainer.inference_model());
    assert!(before > 0.9, "σ(−0.5) is near the threshold: {before}");
    assert!(after < 0.5 * before, "indecision {before} → {after}");

    let bad = micro(10, committed(-1.0));
    assert!(bad.validate().is_err(), "a negative β is refused");
}

#[test]
fn dropout_only_acts_in_training() {
    let cfg = micro(10, Routing::tsa(0.0)).with_dropout(0.5);
    let device = cpu().autodiff();
    let m = model(&cfg, 8, &device);
    let x = tokens(&rows(2, 12, 10, 4), &device);
    let train = || {
        let exec = Execution::Train {
            progress: 0.0,
            skip_halted: false,
        };
        floats(m.forward(x.clone(), exec).logits.inner())
    };
    let (a, b) = (train(), train());
    assert!(
        max_abs_diff(&a, &b) > 1e-3,
        "dropout 0.5 changed nothing in training"
    );
    // Evaluation (no autodiff) equals the same weights without dropout.
    let eval = m.valid();
    let plain = TsaModel_without_dropout(&eval);
    let xs = x.valid();
    let e1 = floats(eval.forward(xs.clone(), Execution::Soft).logits);
    let e2 = floats(eval.forward(xs.clone(), Execution::Soft).logits);
    let e3 = floats(plain.forward(xs, Execution::Soft).logits);
    assert_eq!(e1, e2);
    assert!(max_abs_diff(&e1, &e3) < 1e-6);
    assert!(
        micro(10, Routing::Dense)
            .with_dropout(1.0)
            .validate()
            .is_err()
    );
    assert!(
        micro(10, Routing::Dense)
            .with_dropout(-0.1)
            .validate()
            .is_err()
    );
}

#[allow(non_snake_case)]
fn TsaModel_without_dropout(m: &tsa_core::TsaModel) -> tsa_core::TsaModel {
    let cfg = m.config.clone().with_dropout(0.0);
    let device = m.device();
    cfg.init(&device)
        .unwrap()
        .load_record(m.clone().into_record())
}

#[test]
fn init_schemes_differ_only_in_the_unnamed_layers() {
    let device = cpu();
    let torch = model(
        &micro(10, Routing::tsa(0.0))
            .with_d_model(64)
            .with_init(InitScheme::Torch),
        1,
        &device,
    );
    let normal = model(
        &micro(10, Routing::tsa(0.0))
            .with_d_model(64)
            .with_init(InitScheme::Normal),
        1,
        &device,
    );
    let stats = |t: Tensor<2>| {
        let v = floats(t);
        let n = v.len() as f32;
        let mean = v.iter().sum::<f32>() / n;
        let std = (v.iter().map(|x| (x - mean).powi(2)).sum::<f32>() / n).sqrt();
        let max = v.iter().fold(0.0f32, |m, x| m.max(x.abs()));
        (std, max)
    };
    let bound = 1.0 / 64f32.sqrt();
    let (std, max) = stats(torch.blocks[1].attn.qkv.weight.val());
    assert!(
        max <= bound && (std - bound / 3f32.sqrt()).abs() < 0.01,
        "torch qkv: std {std}, max {max}"
    );
    let (std, _) = stats(normal.blocks[1].attn.qkv.weight.val());
    assert!((std - 0.02).abs() < 0.003, "normal qkv: std {std}");
    // Named in Appendix A: the same distribution in both.
    let residual = 0.02 / (2.0f32 * 3.0).sqrt();
    for m in [&torch, &normal] {
        let (std, _) = stats(m.blocks[1].attn.proj.weight.val());
        assert!(
            (std - residual).abs() < 0.002,
            "residual projection std {std}"
        );
        let b = floats(m.routers[0].out.bias.as_ref().unwrap().val());
        assert_eq!(b, vec![-1.0]);
    }
}

#[test]
fn recipes_build_and_old_configs_still_load() {
    for r in [
        Recipe::paper_lm(65, Routing::tsa(0.001)),
        Recipe::quick_lm(65, Routing::Dense),
        Recipe::synthetic(Routing::EarlyExit),
        Recipe::tiny(65, Routing::tsa(0.001)),
    ] {
        r.model.validate().unwrap();
        r.train.validate().unwrap();
    }
    let paper = Recipe::paper_lm(65, Routing::tsa(0.001));
    assert_eq!(
        (
            paper.model.dropout,
            paper.train.warmup_steps,
            paper.train.lr
        ),
        (0.1, 0, 3e-4)
    );
    // A config written before gates, dropout and init schemes existed.
    let old = r#"{"vocab_size":65,"d_model":64,"n_layers":4,"n_heads":4,"d_ff":256,"context":64,"router_hidden":null,"routing":{"kind":"tsa","lambda":0.001}}"#;
    assert!(
        serde_json::from_str::<TsaConfig>(old).is_err(),
        "(upgrade_json is needed)"
    );
    let mut v: serde_json::Value = serde_json::from_str(old).unwrap();
    TsaConfig::upgrade_json(&mut v);
    let cfg: TsaConfig = serde_json::from_value(v).unwrap();
    assert_eq!(cfg.init, InitScheme::Normal);
    assert_eq!(cfg.routing, Routing::tsa(0.001));
    assert_eq!((cfg.dropout, cfg.router_bias), (0.0, -1.0));
    let mut bad: serde_json::Value = serde_json::from_str(old).unwrap();
    bad["routing"]["gate"] = serde_json::json!({"kind": "nonsense"});
    TsaConfig::upgrade_json(&mut bad);
    assert!(serde_json::from_value::<TsaConfig>(bad).is_err());
    assert!(
        micro(10, gated(TsaGate::StraightThrough, Some(1.5)))
            .validate()
            .is_err()
    );
}
