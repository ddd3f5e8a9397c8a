//! Generation with the KV cache on the native wgpu backend (lavapipe on a machine without a GPU)
//! against the same weights on flex: there a generation step attends over the cache's whole
//! fixed-capacity buffers under a mask (one shape for every step), on flex a prefill takes the
//! written positions only. Skipped, saying so, without an adapter.

mod common;

use burn::module::{Module, Param};
use burn::tensor::{Device, Distribution, Tensor};
use rand::SeedableRng;
use rand::rngs::StdRng;
use tsa_core::generate::{Generation, generate};
use tsa_core::read::block_on;
use tsa_core::{Execution, KeepScale, Recipe, Routing, TsaModel};

/// Greedy generations soft and sparse: [soft, sparse].
fn both(model: &TsaModel, prompt: &[u32], n: usize) -> [Generation; 2] {
    [Execution::Soft, Execution::Sparse(KeepScale::OneMinusP)].map(|exec| {
        let mut rng = StdRng::seed_from_u64(0);
        block_on(generate(model, prompt, n, 0.0, exec, &mut rng)).expect("generation")
    })
}

#[test]
fn generation_on_wgpu_matches_flex() {
    if common::is_child() {
        return child();
    }
    let Some(v) = common::run_child("generation_on_wgpu_matches_flex") else {
        return;
    };
    assert_eq!(v.len(), 5, "{v:?}");
    // A prompt longer than the context of 8 and 30 tokens after it: four roll-overs.
    assert_eq!(v[0], 0.0, "soft: tokens differing from flex's ({v:?})");
    assert_eq!(v[1], 0.0, "sparse: tokens differing from flex's ({v:?})");
    assert!(v[2] < 1e-4, "max |p_wgpu − p_flex| = {} ({v:?})", v[2]);
    assert_eq!(v[3], v[4], "executed α on wgpu and flex ({v:?})");
    assert!(
        v[3] > 0.05 && v[3] < 0.95,
        "the test needs halted and kept tokens: executed α {}",
        v[3]
    );
}

fn child() {
    let Some(device) = common::wgpu_device() else {
        return;
    };
    let flex = Device::flex();
    flex.seed(7);
    let cfg = Recipe::micro(16, Routing::tsa(0.0)).model.with_context(8);
    let mut model = cfg.init(&flex).expect("valid config");
    // Sharp routers with no bias: decisions that differ by token, far from the threshold.
    for r in model.routers.iter_mut() {
        let w = r.out.weight.val();
        let dims = w.dims();
        r.out.weight =
            Param::from_tensor(Tensor::random(dims, Distribution::Normal(0.0, 30.0), &flex));
        r.out.bias = Some(Param::from_tensor(Tensor::zeros([1], &flex)));
    }
    let on_gpu = model.clone().to_device(&device);
    let prompt: Vec<u32> = (0..11).map(|i| (i * 5 + 3) % 16).collect();
    let [cpu_soft, cpu_sparse] = both(&model, &prompt, 30);
    let [gpu_soft, gpu_sparse] = both(&on_gpu, &prompt, 30);
    let differing = |a: &Generation, b: &Generation| {
        a.tokens
            .iter()
            .zip(&b.tokens)
            .filter(|(x, y)| x != y)
            .count() as f32
    };
    let dp = cpu_soft
        .halting
        .iter()
        .flatten()
        .zip(gpu_soft.halting.iter().flatten())
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    common::report(&[
        differing(&cpu_soft, &gpu_soft),
        differing(&cpu_sparse, &gpu_sparse),
        dp,
        gpu_sparse.alpha as f32,
        cpu_sparse.alpha as f32,
    ]);
}
