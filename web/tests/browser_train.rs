//! Burn training inside the browser: a tiny `tsa-core` model takes ~20 AdamW steps on one batch
//! of Tiny-Shakespeare-like text, on WebGPU and on the flex CPU backend compiled to wasm, and its
//! loss must fall. Run by scripts/test in headless Chromium (wasm-bindgen-test-runner).

use burn::tensor::Device;
use burn::tensor::wgpu::WgpuBackend;
use rand::SeedableRng;
use tsa_core::data::{Corpus, Split};
use tsa_core::{Recipe, Routing, TrainConfig, Trainer};
use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_browser);

const TEXT: &str = "To be, or not to be, that is the question:\n\
Whether 'tis nobler in the mind to suffer\n\
The slings and arrows of outrageous fortune,\n\
Or to take arms against a sea of troubles\n\
And by opposing end them. To die: to sleep;\n\
No more; and by a sleep to say we end\n\
The heart-ache and the thousand natural shocks\n";

const STEPS: usize = 20;

/// (first loss, last loss, α at the last step) after `STEPS` steps on one fixed batch.
async fn train(name: &str, device: &Device) -> (f32, f32, f32) {
    train_with(name, device, Routing::tsa(0.01), 0.0, false).await
}

/// The same with another routing and dropout.
async fn train_with(
    name: &str,
    device: &Device,
    routing: Routing,
    dropout: f64,
    skip_halted: bool,
) -> (f32, f32, f32) {
    let context = 16;
    let corpus = Corpus::from_text(TEXT, context).expect("corpus");
    let model = Recipe::micro(corpus.tokenizer.vocab_size(), routing)
        .model
        .with_context(context)
        .with_dropout(dropout);
    let train = TrainConfig::new()
        .with_lr(1e-2)
        .with_warmup_steps(1)
        .with_steps(STEPS)
        .with_batch_size(4)
        .with_seed(7)
        .with_skip_halted(skip_halted);
    let mut trainer = Trainer::new(&model, train, device).expect("trainer");
    let dev = trainer.model.device();
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let batch = corpus.batch(Split::Train, 4, context, &mut rng, &dev);
    let mut losses = Vec::new();
    let mut alpha = f32::NAN;
    for _ in 0..STEPS {
        let stats = trainer.step(&batch).await.expect("training step");
        losses.push(stats.task_loss);
        alpha = stats.alpha;
    }
    console_log!("{name}: losses {losses:?}");
    (losses[0], losses[STEPS - 1], alpha)
}

fn check((first, last, alpha): (f32, f32, f32)) {
    assert!(
        first.is_finite() && last.is_finite(),
        "loss {first} -> {last}"
    );
    assert!(
        last < 0.7 * first,
        "loss did not fall enough: {first} -> {last}"
    );
    assert!((0.0..=1.0).contains(&alpha), "alpha {alpha} outside [0, 1]");
}

thread_local! {
    static WEBGPU: std::cell::RefCell<Option<Device>> = const { std::cell::RefCell::new(None) };
}

/// The page's WebGPU device, initialised once (a second initialisation is refused).
async fn webgpu() -> Device {
    if let Some(device) = WEBGPU.with(|d| d.borrow().clone()) {
        return device;
    }
    let device = Device::wgpu_options()
        .graphics_api(WgpuBackend::WebGpu)
        .init_async()
        .await
        .expect("a WebGPU adapter (run Chromium with --enable-unsafe-webgpu)");
    WEBGPU.with(|d| *d.borrow_mut() = Some(device.clone()));
    device
}

#[wasm_bindgen_test]
async fn trains_on_flex_in_wasm() {
    check(train("flex", &Device::flex()).await);
}

#[wasm_bindgen_test]
async fn trains_on_webgpu() {
    let device = webgpu().await;
    check(train("webgpu", &device).await);
}

/// Dropout (seeded, on the device: no host read) and the straight-through gate train in the
/// browser on both backends.
#[wasm_bindgen_test]
async fn trains_with_dropout_and_a_straight_through_gate() {
    let routing = Routing::Tsa {
        lambda: 0.0,
        gate: tsa_core::TsaGate::StraightThrough,
        target: Some(0.5),
        commit: 0.0,
    };
    check(
        train_with(
            "flex, dropout 0.1, straight-through",
            &Device::flex(),
            routing,
            0.1,
            false,
        )
        .await,
    );
    let device = webgpu().await;
    check(
        train_with(
            "webgpu, dropout 0.1, straight-through",
            &device,
            routing,
            0.1,
            false,
        )
        .await,
    );
}

/// The web app's CPU option: halted tokens skip the FFN in training (a host read of the keep
/// mask per routed block, which flex in wasm does synchronously).
#[wasm_bindgen_test]
async fn trains_on_flex_in_wasm_skipping_halted_tokens() {
    let routing = Routing::Tsa {
        lambda: 0.0,
        gate: tsa_core::TsaGate::StraightThroughScaled,
        target: Some(0.5),
        commit: 0.0,
    };
    let reads = tsa_core::sparse::host_reads();
    check(
        train_with(
            "flex, skipping halted tokens",
            &Device::flex(),
            routing,
            0.0,
            true,
        )
        .await,
    );
    assert!(
        tsa_core::sparse::host_reads() >= reads + STEPS * 2,
        "every step gathers the kept rows of both routed blocks"
    );
}
