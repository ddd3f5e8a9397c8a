use burn::module::{Module, ModuleMapper, Param};
use burn::tensor::Tensor;
use rand::SeedableRng;
use rand::rngs::StdRng;
use tsa_core::data::Batch;
use tsa_core::data::tasks::{Task, TaskSet};
use tsa_core::optim::{decay_groups, decays};
use tsa_core::read::block_on;
use tsa_core::{Execution, Routing, TrainConfig, Trainer, TsaError, evaluate};

use crate::common::*;

fn quick(steps: usize) -> TrainConfig {
    TrainConfig::new()
        .with_lr(3e-3)
        .with_warmup_steps(5)
        .with_steps(steps)
        .with_batch_size(4)
        .with_seed(5)
}

#[test]
fn a_tiny_model_overfits_a_tiny_batch_with_every_variant() {
    let device = cpu();
    let set = TaskSet::generate(Task::Copy, 8, 1, 1);
    let (x, y, m) = TaskSet::rows(&set.train[..4]);
    for routing in all_routings() {
        let cfg = micro(32, routing).with_context(tsa_core::data::tasks::SEQ_LEN);
        let mut trainer = Trainer::new(&cfg, quick(80), &device).unwrap();
        let batch = Batch::new(
            x.clone(),
            y.clone(),
            Some(m.clone()),
            cfg.context,
            &trainer.model.device(),
        );
        let first = block_on(trainer.step(&batch)).unwrap();
        let mut last = first;
        for _ in 1..80 {
            last = block_on(trainer.step(&batch)).unwrap();
        }
        assert_eq!(last.step, 80);
        assert!(
            last.task_loss < 0.3 * first.task_loss,
            "{routing:?}: task loss {} → {} did not fall well below its start",
            first.task_loss,
            last.task_loss
        );
        if routing.has_routers() {
            assert!(
                last.alpha > 0.0 && last.alpha <= 1.0,
                "{routing:?}: α = {}",
                last.alpha
            );
        } else {
            assert_eq!(last.alpha, 1.0);
        }
    }
}

#[test]
fn evaluation_reports_loss_bpc_alpha_and_accuracy() {
    let device = cpu();
    let set = TaskSet::generate(Task::Copy, 8, 8, 2);
    let cfg = micro(32, Routing::tsa(0.0)).with_context(tsa_core::data::tasks::SEQ_LEN);
    let model = model(&cfg, 1, &device);
    let (x, y, m) = TaskSet::rows(&set.test);
    let batches = vec![Batch::new(x, y, Some(m), cfg.context, &device)];
    let s = block_on(evaluate(&model, &batches, Execution::Soft)).unwrap();
    assert!(
        (s.loss - (32f64).ln()).abs() < 0.5,
        "untrained loss ≈ ln 32, got {}",
        s.loss
    );
    assert!((s.bpc - s.loss / std::f64::consts::LN_2).abs() < 1e-9);
    assert!(
        (s.alpha - 0.731).abs() < 0.03,
        "untrained α ≈ 1 − σ(−1), got {}",
        s.alpha
    );
    assert!((0.0..=1.0).contains(&s.accuracy));
    assert!(block_on(evaluate(&model, &[], Execution::Soft)).is_err());
}

#[test]
fn decay_groups_follow_the_paper() {
    let device = cpu();
    let model = model(&micro(10, Routing::tsa(0.0)), 1, &device);
    let g = decay_groups(&model);
    let has = |v: &[String], s: &str| v.iter().any(|p| p == s);
    for p in [
        "blocks.0.attn.qkv.weight",
        "blocks.2.ffn.proj.weight",
        "routers.1.fc.weight",
        "routers.0.out.weight",
    ] {
        assert!(has(&g.decay, p), "{p} should decay: {:?}", g.decay);
    }
    for p in [
        "tok_emb.weight",
        "pos_emb",
        "blocks.0.ln_attn.gamma",
        "blocks.0.ln_attn.beta",
        "blocks.1.ffn.fc.bias",
        "routers.0.out.bias",
        "ln_f.gamma",
    ] {
        assert!(
            has(&g.no_decay, p),
            "{p} should not decay: {:?}",
            g.no_decay
        );
    }
    assert_eq!(g.decay.len() + g.no_decay.len(), {
        let mut n = 0;
        struct Count<'a>(&'a mut usize);
        impl burn::module::ModuleVisitor for Count<'_> {
            fn visit_float<const D: usize>(&mut self, _: &Param<Tensor<D>>) {
                *self.0 += 1;
            }
        }
        model.visit(&mut Count(&mut n));
        n
    });
    assert!(
        !decays("tok_emb.weight", 2)
            && decays("blocks.0.attn.proj.weight", 2)
            && !decays("x.bias", 1)
    );
}

#[test]
fn weight_decay_reaches_only_the_decay_group() {
    // With a zero loss gradient, AdamW's update is pure decay: W ← W(1 − lr·wd) on the decay
    // group, untouched elsewhere.
    let device = cpu().autodiff();
    let cfg = micro(10, Routing::tsa(0.0));
    let train = TrainConfig::new()
        .with_lr(0.1)
        .with_warmup_steps(0)
        .with_steps(10)
        .with_weight_decay(0.5)
        .with_grad_clip(0.0);
    let mut trainer = Trainer::new(&cfg, train, &device).unwrap();
    let before = trainer.model.clone();
    let x = tokens(&[vec![1, 2, 3, 4]], &device);
    let zero_mask = Some(Tensor::<2>::zeros([1, 4], &device));
    let batch = Batch {
        inputs: x.clone(),
        targets: x,
        mask: zero_mask,
    };
    // λ = 0 and an all-zero mask: the objective is 0 with a zero gradient everywhere.
    block_on(trainer.step(&batch)).unwrap();
    let after = &trainer.model;
    let ratio = |a: Tensor<2>, b: Tensor<2>| floats(a.sum())[0] / floats(b.sum())[0];
    let w0 = before.blocks[1].ffn.fc.weight.val();
    let w1 = after.blocks[1].ffn.fc.weight.val();
    assert!(
        (ratio(w1, w0) - 0.95).abs() < 1e-3,
        "decayed by 1 − lr·wd = 0.95"
    );
    assert_eq!(
        floats(before.tok_emb.weight.val()),
        floats(after.tok_emb.weight.val())
    );
    assert_eq!(floats(before.pos_emb.val()), floats(after.pos_emb.val()));
    assert_eq!(
        floats(before.blocks[0].ln_attn.gamma.val()),
        floats(after.blocks[0].ln_attn.gamma.val())
    );
}

#[test]
fn a_non_finite_loss_stops_training_and_keeps_the_last_good_model() {
    let device = cpu();
    let cfg = micro(10, Routing::tsa(0.01));
    let mut trainer = Trainer::new(&cfg, quick(10), &device).unwrap();
    let dev = trainer.model.device();
    let x = tokens(&[vec![1, 2, 3, 4]], &dev);
    let good = Batch {
        inputs: x.clone(),
        targets: x.clone(),
        mask: None,
    };
    block_on(trainer.step(&good)).unwrap();
    // Poison one weight: the next forward pass produces NaN.
    struct Poison;
    impl ModuleMapper for Poison {
        fn map_float<const D: usize>(&mut self, p: Param<Tensor<D>>) -> Param<Tensor<D>> {
            let id = p.id;
            let poisoned = Tensor::from_inner(p.val().inner().mul_scalar(f32::NAN));
            Param::initialized(id, poisoned.require_grad())
        }
    }
    trainer.model = trainer.model.clone().map(&mut Poison);
    let poisoned = trainer.model.clone();
    let err = block_on(trainer.step(&good)).unwrap_err();
    assert!(
        matches!(err, TsaError::NonFiniteLoss { step: 2, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("that step was not applied"));
    assert_eq!(trainer.step, 1, "the failed step is not counted");
    // The model is exactly what it was before the failing step (no update applied).
    let w = |m: &tsa_core::TsaModel| {
        floats(m.blocks[0].ffn.fc.weight.val())
            .iter()
            .map(|x| x.to_bits())
            .collect::<Vec<_>>()
    };
    assert_eq!(w(&trainer.model), w(&poisoned));
}

#[test]
fn learning_rate_warms_up_then_follows_a_cosine() {
    let c = TrainConfig::new()
        .with_lr(1e-3)
        .with_warmup_steps(10)
        .with_steps(110)
        .with_min_lr_ratio(0.1);
    assert!((c.lr_at(0) - 1e-4).abs() < 1e-12);
    assert!((c.lr_at(9) - 1e-3).abs() < 1e-12);
    assert!((c.lr_at(10) - 1e-3).abs() < 1e-12);
    assert!(
        (c.lr_at(60) - 5.5e-4).abs() < 1e-9,
        "halfway: mean of max and min"
    );
    assert!((c.lr_at(110) - 1e-4).abs() < 1e-12);
    assert!((c.lr_at(500) - 1e-4).abs() < 1e-12);
    assert!(TrainConfig::new().with_lr(0.0).validate().is_err());
    assert!(TrainConfig::new().with_batch_size(0).validate().is_err());
}

#[test]
fn lm_batches_from_a_corpus_train() {
    let device = cpu();
    let text = "the quick brown fox jumps over the lazy dog. ".repeat(40);
    let corpus = tsa_core::data::Corpus::from_text(&text, 16).unwrap();
    let cfg = micro(corpus.tokenizer.vocab_size(), Routing::tsa(0.001));
    let mut trainer = Trainer::new(&cfg, quick(40), &device).unwrap();
    let mut rng = StdRng::seed_from_u64(0);
    let dev = trainer.model.device();
    let mut losses = Vec::new();
    for _ in 0..40 {
        let (x, y) = corpus.sample(tsa_core::data::Split::Train, 4, 16, &mut rng);
        losses.push(
            block_on(trainer.step(&Batch::new(x, y, None, 16, &dev)))
                .unwrap()
                .task_loss,
        );
    }
    assert!(
        losses[39] < losses[0] * 0.7,
        "{} → {}",
        losses[0],
        losses[39]
    );
}
