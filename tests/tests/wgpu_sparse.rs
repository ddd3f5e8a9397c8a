//! Sparse inference's GPU kernels (`tsa-shaders`: the keep mask compacted on the device,
//! the kept rows' FFN and, in the extended mode, their attention query rows dispatched on
//! bounded grids, no host read) against Burn's ops on the same
//! wgpu device — lavapipe on a machine without a GPU. Skipped, saying so, without an adapter.

mod common;

use burn::module::Param;
use burn::tensor::{Device, Distribution, Int, Tensor, TensorData};
use tsa_core::attention::CausalSelfAttention;
use tsa_core::ffn::Ffn;
use tsa_core::{Execution, KeepScale, Recipe, Routing};

fn max_abs_diff(a: Tensor<3>, b: Tensor<3>) -> f32 {
    let d = (a - b).abs().max().into_data();
    d.convert::<f32>().try_into_vec::<f32>().expect("floats")[0]
}

/// The kernels' `h + scale ⊙ ffn(x)` (FFN only where scale > 0) against Burn's ops, for a
/// share `halted` of tokens with scale 0.
fn kernel_vs_ops(device: &Device, b: usize, t: usize, halted: f64, d: usize, d_ff: usize) -> f32 {
    device.seed(11);
    let cfg = Recipe::micro(16, Routing::Dense)
        .model
        .with_d_model(d)
        .with_d_ff(d_ff);
    let ffn = Ffn::init(&cfg, device);
    let normal = |d| Tensor::<3>::random([b, t, d], Distribution::Normal(0.0, 1.0), device);
    let (h, x) = (normal(cfg.d_model), normal(cfg.d_model));
    let u = Tensor::<3>::random([b, t, 1], Distribution::Uniform(0.0, 1.0), device);
    let scale = u.clone().mask_fill(u.lower_elem(halted), 0.0);
    assert!(
        tsa_shaders::available(device),
        "a wgpu device runs the kernels"
    );
    let kernel = tsa_core::sparse::add_ffn_kept(h.clone(), &ffn, x.clone(), scale.clone());
    max_abs_diff(kernel, h + scale * ffn.forward(x))
}

/// The extended mode's kernels (only the kept tokens' query rows run: Q, scores, output
/// projection) against Burn's masked attention `h + scale ⊙ attn(x)`.
fn attention_kernel_vs_ops(
    device: &Device,
    b: usize,
    t: usize,
    halted: f64,
    d: usize,
    heads: usize,
) -> f32 {
    device.seed(13);
    let cfg = Recipe::micro(16, Routing::Dense)
        .model
        .with_d_model(d)
        .with_n_heads(heads);
    let attn = CausalSelfAttention::init(&cfg, device);
    let normal = |d| Tensor::<3>::random([b, t, d], Distribution::Normal(0.0, 1.0), device);
    let (h, x) = (normal(cfg.d_model), normal(cfg.d_model));
    let u = Tensor::<3>::random([b, t, 1], Distribution::Uniform(0.0, 1.0), device);
    let scale = u.clone().mask_fill(u.lower_elem(halted), 0.0);
    let kernel = tsa_core::sparse::add_attention_kept(h.clone(), &attn, x.clone(), scale.clone());
    max_abs_diff(kernel, h + scale * attn.forward(x, None))
}

/// A TSA model whose routers halt some tokens: logits of sparse execution (the kernels) against
/// hard routing by masking, and the executed α.
fn model_sparse_vs_masked(device: &Device, exec: Execution) -> (f32, f32) {
    device.seed(5);
    let cfg = Recipe::micro(16, Routing::tsa(0.0)).model;
    let mut model = cfg.init(device).expect("valid config");
    // Routers with large random weights and no bias: sharp decisions that differ by token.
    for r in model.routers.iter_mut() {
        let random = |dims: [usize; 2], std| {
            Param::from_tensor(Tensor::random(dims, Distribution::Normal(0.0, std), device))
        };
        r.fc.weight = random(r.fc.weight.dims(), 1.0);
        r.out.weight = random(r.out.weight.dims(), 100.0);
        r.out.bias = Some(Param::from_tensor(Tensor::zeros([1], device)));
    }
    let ids: Vec<i32> = (0..2 * 16).map(|i| (i * 7 + 3) % 16).collect();
    let tokens = Tensor::<2, Int>::from_data(TensorData::new(ids, [2, 16]), device);
    let reads = tsa_core::sparse::host_reads();
    let sparse = model.forward(tokens.clone(), exec);
    // No host read on the device path (on flex each routed block reads its keep mask).
    assert_eq!(
        tsa_core::sparse::host_reads(),
        reads,
        "sparse execution read back to the host"
    );
    let masked = model.forward(tokens, Execution::Hard(KeepScale::OneMinusP));
    let ran = Tensor::cat(sparse.active, 0).mean().into_data();
    let alpha = ran.convert::<f32>().try_into_vec::<f32>().expect("floats")[0];
    (max_abs_diff(sparse.logits, masked.logits), alpha)
}

#[test]
fn sparse_kernels_on_wgpu_match_burn_ops() {
    if common::is_child() {
        return child();
    }
    let Some(v) = common::run_child("sparse_kernels_on_wgpu_match_burn_ops") else {
        return;
    };
    assert_eq!(v.len(), 13, "{v:?}");
    // Five FFN kernel cases (some halted; 600 rows over three scan blocks and a partial row
    // tile; none halted with d = 24, d_ff = 40, off the 16-wide tiles; all halted; one row),
    // four attention cases (some halted, T = 200 over several key tiles, none halted with 3
    // heads of 8, all halted), and the whole model with sparse FFNs and with the extended mode:
    // each equal to Burn's ops to 1e-4.
    for (i, diff) in v[..11].iter().enumerate() {
        assert!(
            *diff < 1e-4,
            "case {i}: max |kernels − Burn ops| = {diff} ({v:?})"
        );
    }
    for alpha in [v[11], v[12]] {
        assert!(
            alpha > 0.05 && alpha < 0.95,
            "the model test needs halted and kept tokens: executed α {alpha}"
        );
    }
}

fn child() {
    let Some(device) = common::wgpu_device() else {
        return;
    };
    let (logits, alpha) = model_sparse_vs_masked(&device, Execution::Sparse(KeepScale::OneMinusP));
    let (q_logits, q_alpha) =
        model_sparse_vs_masked(&device, Execution::SparseQueries(KeepScale::OneMinusP));
    common::report(&[
        kernel_vs_ops(&device, 2, 37, 0.3, 32, 64),
        kernel_vs_ops(&device, 3, 200, 0.5, 32, 64),
        kernel_vs_ops(&device, 2, 16, 0.0, 24, 40),
        kernel_vs_ops(&device, 2, 16, 1.1, 32, 64),
        kernel_vs_ops(&device, 1, 1, 0.0, 24, 40),
        attention_kernel_vs_ops(&device, 2, 37, 0.3, 32, 4),
        attention_kernel_vs_ops(&device, 3, 200, 0.5, 64, 2),
        attention_kernel_vs_ops(&device, 2, 16, 0.0, 24, 3),
        attention_kernel_vs_ops(&device, 2, 16, 1.1, 32, 4),
        logits,
        q_logits,
        alpha,
        q_alpha,
    ]);
}
