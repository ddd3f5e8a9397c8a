use burn::module::Module;
use burn::tensor::Tensor;
use tsa_core::loss::objective;
use tsa_core::{Execution, KeepScale, Routing, TsaConfig};

use crate::common::*;

#[test]
fn parameter_counts_match_the_paper() {
    // Table 2: baseline 4,782,336, TSA 4,864,901 (+1.7%) at d=256, L=6, H=8, d_ff=1024, ctx 128.
    let device = cpu();
    let dense = TsaConfig::paper_lm(65, Routing::Dense)
        .init(&device)
        .unwrap();
    let tsa = TsaConfig::paper_lm(65, Routing::tsa(0.001))
        .init(&device)
        .unwrap();
    assert_eq!(dense.num_params(), 4_782_336);
    assert_eq!(tsa.num_params(), 4_864_901);
    let overhead = tsa.num_params() as f64 / dense.num_params() as f64 - 1.0;
    assert!((overhead - 0.017).abs() < 0.0005, "overhead {overhead}");
}

#[test]
fn synthetic_model_sizes_match_the_paper() {
    // §3.1: baseline 1.20M, TSA 1.22M parameters.
    let device = cpu();
    let dense = TsaConfig::paper_synthetic(Routing::Dense)
        .init(&device)
        .unwrap();
    let tsa = TsaConfig::paper_synthetic(Routing::tsa(0.001))
        .init(&device)
        .unwrap();
    assert_eq!((dense.num_params() as f64 / 1e4).round() / 100.0, 1.20);
    assert_eq!((tsa.num_params() as f64 / 1e4).round() / 100.0, 1.22);
}

#[test]
fn impossible_configs_are_refused_with_a_reason() {
    let device = cpu();
    let err = micro(10, Routing::Dense)
        .with_n_heads(3)
        .init(&device)
        .unwrap_err();
    assert!(err.to_string().contains("divisible"), "{err}");
    let err = micro(10, Routing::tsa(0.0))
        .with_n_layers(1)
        .init(&device)
        .unwrap_err();
    assert!(err.to_string().contains("at least 2 blocks"), "{err}");
    let err = micro(10, Routing::tsa(f64::NAN)).init(&device).unwrap_err();
    assert!(err.to_string().contains("λ"), "{err}");
    let err = micro(10, Routing::MixtureOfDepths { capacity: 0.0 })
        .init(&device)
        .unwrap_err();
    assert!(err.to_string().contains("capacity"), "{err}");
    assert!(micro(0, Routing::Dense).init(&device).is_err());
}

#[test]
fn routers_start_near_sigmoid_of_minus_one() {
    let device = cpu();
    let cfg = TsaConfig::tiny(65, Routing::tsa(0.0));
    let model = model(&cfg, 7, &device);
    let toks = tokens(&[(0..64).map(|i| (i * 7) % 65).collect()], &device);
    let out = model.forward(toks, Execution::Soft);
    assert_eq!(out.halting.len(), cfg.n_layers - 1);
    let expected = 1.0 / (1.0 + std::f32::consts::E); // σ(−1) ≈ 0.2689
    for p in out.halting {
        let mean = floats(p.mean())[0];
        assert!(
            (mean - expected).abs() < 0.02,
            "router mean p = {mean}, expected ≈ {expected}"
        );
    }
}

/// Changing the last token must leave every earlier position's logits and halting
/// probabilities unchanged, for every causal execution of every variant.
#[test]
fn changing_a_later_token_leaves_earlier_positions_unchanged() {
    let device = cpu();
    let a: Vec<i32> = vec![3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8];
    let mut b = a.clone();
    *b.last_mut().unwrap() = 7;
    let t = a.len();
    let cases = [
        (Routing::Dense, Execution::Soft),
        (Routing::tsa(0.0), Execution::Soft),
        (Routing::tsa(0.0), Execution::Sparse(KeepScale::OneMinusP)),
        (Routing::EarlyExit, Execution::Soft),
        (Routing::EarlyExit, Execution::Exit { threshold: 0.05 }),
        (
            Routing::MixtureOfDepths { capacity: 0.5 },
            Execution::Sparse(KeepScale::OneMinusP),
        ),
    ];
    for (routing, exec) in cases {
        let model = model(&micro(10, routing), 3, &device);
        let oa = model.forward(tokens(std::slice::from_ref(&a), &device), exec);
        let ob = model.forward(tokens(std::slice::from_ref(&b), &device), exec);
        let early = |x: Tensor<3>| floats(x.narrow(1, 0, t - 1));
        let d = max_abs_diff(&early(oa.logits.clone()), &early(ob.logits.clone()));
        assert!(
            d < 1e-5,
            "{routing:?}/{exec:?}: earlier logits moved by {d}"
        );
        // The last position's logits do change: the test can fail.
        let last = |x: Tensor<3>| floats(x.narrow(1, t - 1, 1));
        assert!(max_abs_diff(&last(oa.logits), &last(ob.logits)) > 1e-4);
        for (pa, pb) in oa.halting.iter().zip(&ob.halting) {
            let e = |x: &Tensor<2>| floats(x.clone().narrow(1, 0, t - 1));
            let d = max_abs_diff(&e(pa), &e(pb));
            assert!(
                d < 1e-5,
                "{routing:?}/{exec:?}: earlier halting moved by {d}"
            );
        }
    }
}

#[test]
fn mixture_of_depths_top_k_keeps_capacity_per_sequence() {
    let device = cpu();
    let cfg = micro(10, Routing::MixtureOfDepths { capacity: 0.25 });
    let model = model(&cfg, 5, &device);
    let toks = tokens(
        &[
            (0..16).map(|i| i % 10).collect(),
            (0..16).map(|i| (i * 3) % 10).collect(),
        ],
        &device,
    );
    let out = model.forward(toks, Execution::Soft);
    for a in &out.active {
        let rows = floats(a.clone().sum_dim(1));
        assert_eq!(
            rows,
            vec![4.0, 4.0],
            "each sequence keeps ceil(0.25·16) = 4 tokens"
        );
    }
    assert!(out.router_aux.is_some());
}

#[test]
fn router_gets_gradient_from_the_task_loss_alone_at_lambda_zero() {
    let device = cpu().autodiff();
    let cfg = micro(10, Routing::tsa(0.0));
    let model = model(&cfg, 11, &device);
    let x = tokens(&[vec![1, 2, 3, 4, 5, 6, 7, 8]], &device);
    let y = tokens(&[vec![2, 3, 4, 5, 6, 7, 8, 9]], &device);
    let out = model.forward(x, Execution::Soft);
    let obj = objective(cfg.routing, &out, y, None, 0.0);
    let grads = obj.total.backward();
    for (l, r) in model.routers.iter().enumerate() {
        for w in [r.fc.weight.val(), r.out.weight.val()] {
            let g = w.grad(&grads).expect("router weight has a gradient");
            let norm = floats(g.abs().sum())[0];
            assert!(norm > 0.0, "router {l} got a zero gradient at λ = 0");
        }
    }
}

#[test]
fn early_exit_threshold_above_one_runs_every_block() {
    let device = cpu();
    let model = model(&micro(10, Routing::EarlyExit), 2, &device);
    let x = tokens(&[vec![1, 2, 3, 4, 5, 6]], &device);
    let dense = model.forward(x.clone(), Execution::Soft);
    let never = model.forward(x.clone(), Execution::Exit { threshold: 1.1 });
    assert!(max_abs_diff(&floats(dense.logits), &floats(never.logits.clone())) < 1e-5);
    let alpha = floats(tsa_core::metrics::alpha(&never.active).unwrap())[0];
    assert_eq!(alpha, 1.0);
    // A threshold of 0 exits every token after the stem: α = 0.
    let always = model.forward(x, Execution::Exit { threshold: 0.0 });
    assert_eq!(
        floats(tsa_core::metrics::alpha(&always.active).unwrap())[0],
        0.0
    );
}

#[test]
fn skipping_query_rows_changes_nothing_but_the_work() {
    // Extended sparse mode (halted tokens also skip Q, their score rows and the output projection)
    // must give the same logits as sparse mode, on a model whose routers halt some tokens.
    let device = cpu();
    let cfg = micro(10, Routing::tsa(0.0)).with_init(tsa_core::InitScheme::Normal);
    let mut m = model(&cfg, 9, &device);
    for r in m.routers.iter_mut() {
        // Spread the router logits around 0 so roughly half the tokens halt.
        r.out.weight = burn::module::Param::from_tensor(r.out.weight.val().mul_scalar(400.0));
        r.out.bias = Some(burn::module::Param::from_tensor(Tensor::zeros(
            [1],
            &device,
        )));
    }
    let x = tokens(
        &[
            vec![1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1, 2],
            vec![5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0],
        ],
        &device,
    );
    let a = m.forward(x.clone(), Execution::Sparse(KeepScale::OneMinusP));
    let b = m.forward(x, Execution::SparseQueries(KeepScale::OneMinusP));
    let alpha = floats(tsa_core::metrics::alpha(&a.active).unwrap())[0];
    assert!(
        alpha > 0.1 && alpha < 0.9,
        "the test needs some halted tokens, α = {alpha}"
    );
    assert!(max_abs_diff(&floats(a.logits), &floats(b.logits)) < 1e-4);
}

#[test]
fn attention_is_softmax_of_causally_masked_scaled_scores() {
    // Δattn = proj(softmax(QKᵀ/√d_h + M)·V) with M = −∞ above the diagonal, written out by hand,
    // against the module (Burn's attention op: fused on flex, composed under autodiff).
    use burn::tensor::activation::softmax;
    use tsa_core::attention::CausalSelfAttention;
    // t = 301 takes the per-query-range path (ranges of 76, 76, 76 and 73 rows).
    for (device, t) in [
        (cpu(), 7),
        (cpu().autodiff(), 7),
        (cpu(), 301),
        (cpu().autodiff(), 301),
    ] {
        device.seed(3);
        let (b, d, h) = (2, 16, 4);
        let att = CausalSelfAttention::init(&shape(d, h, 4 * d, 2), &device);
        let x = Tensor::<3>::random(
            [b, t, d],
            burn::tensor::Distribution::Normal(0.0, 1.0),
            &device,
        );
        let qkv = att.qkv.forward(x.clone());
        let heads = |m: Tensor<3>| m.reshape([b, t, h, d / h]).swap_dims(1, 2);
        let q = heads(qkv.clone().narrow(2, 0, d));
        let k = heads(qkv.clone().narrow(2, d, d));
        let v = heads(qkv.narrow(2, 2 * d, d));
        let scores = q
            .matmul(k.swap_dims(2, 3))
            .div_scalar(((d / h) as f64).sqrt());
        let future = Tensor::<2, burn::tensor::Bool>::tril_mask([t, t], 0, &device)
            .unsqueeze::<4>()
            .expand([b, h, t, t]);
        let weights = softmax(scores.mask_fill(future, f32::NEG_INFINITY), 3);
        let by_hand = att
            .proj
            .forward(weights.matmul(v).swap_dims(1, 2).reshape([b, t, d]));
        let diff = max_abs_diff(&floats(att.forward(x, None)), &floats(by_hand));
        assert!(
            diff < 1e-5,
            "t = {t}: attention differs from the formula by {diff}"
        );
    }
}

#[test]
fn attention_over_a_cache_equals_attention_over_the_whole_sequence() {
    // A prefix through the cache, then the rest (several tokens, then one) against it: the same
    // rows as one pass over the whole sequence. The ranged path too, queries behind cached keys.
    use tsa_core::attention::{CausalSelfAttention, KvCache, causal_attention_in_ranges};
    let device = cpu();
    device.seed(4);
    let (b, t, d) = (2, 9, 16);
    let att = CausalSelfAttention::init(&shape(d, 4, 4 * d, 2), &device);
    let x = Tensor::<3>::random(
        [b, t, d],
        burn::tensor::Distribution::Normal(0.0, 1.0),
        &device,
    );
    let whole = att.forward(x.clone(), None);
    let mut cache = KvCache::new(t);
    let parts = [(0, 4), (4, 8), (8, 9)]
        .map(|(lo, hi)| att.forward(x.clone().narrow(1, lo, hi - lo), Some(&mut cache)));
    assert_eq!(cache.len(), t);
    let cached = Tensor::cat(parts.to_vec(), 1);
    let diff = max_abs_diff(&floats(cached), &floats(whole.clone()));
    assert!(diff < 1e-5, "cached attention differs by {diff}");
    // Cleared, the cache keeps its buffers and their stale keys: they must stay invisible.
    cache.clear();
    let again = att.forward(x.clone().narrow(1, 0, 5), Some(&mut cache));
    let diff = max_abs_diff(&floats(again), &floats(whole.narrow(1, 0, 5)));
    assert!(diff < 1e-5, "a cleared cache shows stale keys: {diff}");
    // A capacity larger than the tokens cached: the positions never written stay hidden.
    let mut roomy = KvCache::new(3 * t);
    let first = att.forward(x.clone(), Some(&mut roomy));
    let diff = max_abs_diff(&floats(first), &floats(att.forward(x.clone(), None)));
    assert!(diff < 1e-5, "unwritten cache positions are seen: {diff}");

    let qkv = |n: usize| {
        Tensor::<4>::random(
            [1, 2, n, 4],
            burn::tensor::Distribution::Normal(0.0, 1.0),
            &device,
        )
    };
    let (q, k, v) = (qkv(7), qkv(12), qkv(12));
    let one = causal_attention_in_ranges(q.clone(), k.clone(), v.clone(), 1);
    let ranged = causal_attention_in_ranges(q, k, v, 3);
    let diff = max_abs_diff(&floats(one), &floats(ranged));
    assert!(
        diff < 1e-5,
        "ranged attention behind a cache differs by {diff}"
    );
}

#[test]
fn sparse_execution_on_flex_reads_each_keep_mask_back() {
    // The counter that tests/tests/wgpu_sparse.rs uses to show the on-device path reads nothing
    // back: on flex, sparse execution goes through `argwhere`, one host read per routed block.
    let device = cpu();
    let m = model(&micro(10, Routing::tsa(0.0)), 3, &device);
    let x = tokens(&[vec![1, 2, 3, 4]], &device);
    let before = tsa_core::sparse::host_reads();
    m.forward(x, Execution::Sparse(KeepScale::OneMinusP));
    let reads = tsa_core::sparse::host_reads() - before;
    assert!(reads >= m.routers.len(), "{reads} host reads");
}
