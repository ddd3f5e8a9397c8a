//! The same training steps on the native wgpu backend (Vulkan/Metal/DX12; lavapipe on a machine
//! without a GPU) as on flex. Skipped, saying so, without an adapter.

mod common;

use burn::tensor::Device;
use tsa_core::data::Batch;
use tsa_core::read::block_on;
use tsa_core::{Recipe, Routing, TrainConfig, Trainer, TsaConfig};

fn micro() -> TsaConfig {
    Recipe::micro(16, Routing::tsa(0.01)).model.with_context(8)
}

fn two_steps(device: &Device) -> (f32, f32) {
    let train = TrainConfig::new()
        .with_lr(1e-2)
        .with_warmup_steps(1)
        .with_steps(10)
        .with_batch_size(2)
        .with_seed(3);
    let mut trainer = Trainer::new(&micro(), train, device).expect("trainer");
    let dev = trainer.model.device();
    let x: Vec<i32> = (0..16).map(|i| i * 5 % 16).collect();
    let y: Vec<i32> = (0..16).map(|i| (i * 5 + 1) % 16).collect();
    let batch = Batch::new(x, y, None, 8, &dev);
    let a = block_on(trainer.step(&batch)).expect("step 1");
    let b = block_on(trainer.step(&batch)).expect("step 2");
    (a.loss, b.loss)
}

#[test]
fn a_training_step_on_wgpu_matches_flex() {
    if common::is_child() {
        return child();
    }
    let Some(v) = common::run_child("a_training_step_on_wgpu_matches_flex") else {
        return;
    };
    assert_eq!(v.len(), 4, "{v:?}");
    let (cpu, gpu) = ((v[0], v[1]), (v[2], v[3]));
    assert!(gpu.0.is_finite() && gpu.1.is_finite());
    assert!(gpu.1 < gpu.0, "the step lowered the loss on wgpu: {gpu:?}");
    assert!(cpu.1 < cpu.0);
    // Each backend has its own RNG, so the weights differ; both must start near ln 16 (an
    // untrained model).
    for first in [cpu.0, gpu.0] {
        assert!(
            (first - 16f32.ln()).abs() < 0.3,
            "untrained loss {first} ≉ ln 16"
        );
    }
}

fn child() {
    let Some(device) = common::wgpu_device() else {
        return;
    };
    let cpu = two_steps(&Device::flex());
    let gpu = two_steps(&device);
    common::report(&[cpu.0, cpu.1, gpu.0, gpu.1]);
}
