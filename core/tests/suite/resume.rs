//! Training state: a run stopped and resumed from its state file continues as if it had never
//! stopped (model, AdamW's moments, step, μ, batch stream).

use rand::SeedableRng;
use rand::rngs::StdRng;
use serde_json::json;
use tsa_core::checkpoint;
use tsa_core::data::{Corpus, Data};
use tsa_core::read::block_on;
use tsa_core::{Routing, TrainConfig, Trainer, TsaConfig, TsaError, TsaGate, train_state};

use crate::checkpoint::all_params;
use crate::common::*;

const STEPS: usize = 8;

fn setup() -> (Data, TsaConfig, TrainConfig) {
    let text = "To be, or not to be, that is the question:\n".repeat(40);
    let corpus = Corpus::from_text(&text, 16).expect("corpus");
    // A straight-through gate with a compute target: μ moves, and no device noise is drawn.
    let routing = Routing::Tsa {
        lambda: 0.0,
        gate: TsaGate::StraightThrough,
        target: Some(0.5),
        commit: 0.0,
    };
    let model = micro(corpus.tokenizer.vocab_size(), routing);
    let train = TrainConfig::new()
        .with_lr(1e-2)
        .with_warmup_steps(2)
        .with_steps(STEPS)
        .with_batch_size(4)
        .with_seed(7);
    (Data::Lm(corpus), model, train)
}

/// Steps `trainer` to `to`, drawing batches from `rng`.
fn train_to(trainer: &mut Trainer, to: usize, data: &Data, rng: &mut StdRng) {
    let device = trainer.model.device();
    while trainer.step < to {
        let batch = data.train_batch(4, 16, rng, &device);
        block_on(trainer.step(&batch)).expect("finite loss");
    }
}

/// A run stopped at step 4: its state bytes, and the uninterrupted run's trainer at `STEPS`.
fn stopped_and_whole() -> (Vec<u8>, Trainer) {
    let (data, model, train) = setup();
    let device = cpu();
    // One initialisation for both (other tests may reseed the shared device meanwhile).
    let init = Trainer::new(&model, train.clone(), &device)
        .expect("trainer")
        .model;
    let mut whole = Trainer::from_model(init.clone(), train.clone(), 0);
    train_to(
        &mut whole,
        STEPS,
        &data,
        &mut StdRng::seed_from_u64(train.seed),
    );

    let mut stopped = Trainer::from_model(init, train.clone(), 0);
    train_to(
        &mut stopped,
        4,
        &data,
        &mut StdRng::seed_from_u64(train.seed),
    );
    let Data::Lm(corpus) = &data else {
        unreachable!("setup builds a corpus")
    };
    let extra = json!({ "curve": [1.5, 1.25] });
    let bytes = block_on(train_state::to_bytes(
        &stopped,
        Some(corpus.tokenizer.clone()),
        extra,
    ))
    .expect("state");
    (bytes, whole)
}

#[test]
fn a_resumed_run_continues_exactly_where_it_stopped() {
    let (data, _, train) = setup();
    let (bytes, whole) = stopped_and_whole();
    let device = cpu();

    let resumed = train_state::from_bytes(&bytes, &device).expect("state reads back");
    assert_eq!(resumed.extra, json!({ "curve": [1.5, 1.25] }));
    assert_eq!((resumed.trainer.step, resumed.meta.step), (4, 4));
    assert_eq!(resumed.trainer.config, train);
    assert!(resumed.trainer.mu != 0.0, "the target moved μ");
    let mut trainer = resumed.trainer;
    let mut rng = StdRng::seed_from_u64(train.seed);
    data.skip_train_batches(4, 4, 16, &mut rng);
    train_to(&mut trainer, STEPS, &data, &mut rng);

    assert_eq!(trainer.mu, whole.mu, "μ continues");
    let diff = max_abs_diff(
        &all_params(&trainer.inference_model()),
        &all_params(&whole.inference_model()),
    );
    assert!(diff <= 1e-6, "resumed weights differ by {diff}");

    // The same restart without the optimiser's moments (weights only, as a checkpoint gives)
    // ends elsewhere: what the state adds is not nothing.
    let (model, meta) = checkpoint::from_bytes(&bytes, &device.clone().autodiff())
        .expect("state reads as a checkpoint");
    let mut weights_only = Trainer::from_model(model, train.clone(), meta.step);
    weights_only.mu = whole.mu;
    let mut rng = StdRng::seed_from_u64(train.seed);
    data.skip_train_batches(4, 4, 16, &mut rng);
    train_to(&mut weights_only, STEPS, &data, &mut rng);
    let apart = max_abs_diff(
        &all_params(&weights_only.inference_model()),
        &all_params(&whole.inference_model()),
    );
    assert!(
        apart > 1e-4,
        "fresh moments should change the run (apart {apart})"
    );
}

#[test]
fn a_corrupt_or_truncated_state_is_a_clear_error() {
    let (bytes, _) = stopped_and_whole();
    let device = cpu();
    let mut flipped = bytes.clone();
    let mid = flipped.len() / 2;
    flipped[mid] ^= 0x40;
    for (what, b) in [
        ("flipped", &flipped[..]),
        ("truncated", &bytes[..bytes.len() - 9]),
        ("too short", &bytes[..10]),
    ] {
        let err = train_state::from_bytes(b, &device).err();
        assert!(
            matches!(err, Some(TsaError::Checkpoint(ref m)) if m.contains("training state")),
            "{what}: {err:?}"
        );
        assert!(
            checkpoint::from_bytes(b, &device).is_err(),
            "{what}: read as a checkpoint"
        );
    }
    // A plain checkpoint is not a training state.
    let (model, meta) = checkpoint::from_bytes(&bytes, &device).expect("checkpoint");
    let plain = block_on(checkpoint::to_bytes(&model, &meta)).expect("checkpoint bytes");
    assert!(train_state::from_bytes(&plain, &device).is_err());
}
