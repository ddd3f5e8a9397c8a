use rand::SeedableRng;
use rand::rngs::StdRng;
use tsa_core::generate::generate;
use tsa_core::read::block_on;
use tsa_core::{Execution, KeepScale, Routing, TsaModel};

use crate::common::*;

/// Greedy continuation by re-running the full forward pass on the window of tokens the caches
/// hold each time: the whole prefix until the context fills, then (as `generate` rolls over)
/// from the most recent half of the context on.
fn greedy_full(model: &TsaModel, prompt: &[u32], n: usize, exec: Execution) -> Vec<u32> {
    let device = cpu();
    let keep = model.config.context;
    let mut seq: Vec<i32> = prompt.iter().map(|&t| t as i32).collect();
    let mut start = seq.len().saturating_sub(keep);
    for _ in 0..n {
        if seq.len() - 1 - start >= keep {
            start = seq.len() - keep / 2;
        }
        let window = seq[start..].to_vec();
        let t = window.len();
        let out = model.forward(tokens(&[window], &device), exec);
        let last = floats(out.logits.narrow(1, t - 1, 1));
        let next = last
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.total_cmp(b.1))
            .unwrap()
            .0;
        seq.push(next as i32);
    }
    seq[prompt.len()..].iter().map(|&t| t as u32).collect()
}

/// A micro model (context 16) whose routers are spread so that some tokens halt in sparse mode.
fn spread_model(routing: Routing) -> TsaModel {
    let device = cpu();
    let mut m = model(&micro(10, routing), 4, &device);
    for r in m.routers.iter_mut() {
        r.out.weight = burn::module::Param::from_tensor(r.out.weight.val().mul_scalar(300.0));
        r.out.bias = Some(burn::module::Param::from_tensor(
            burn::tensor::Tensor::zeros([1], &device),
        ));
    }
    m
}

/// Greedy generation soft, sparse and masked against the full forward pass over the same
/// window, for a dense and a routed model: returns the sparse runs' executed α.
fn check_against_full_forward(prompt: &[u32], n: usize) -> Vec<f64> {
    let mut alphas = Vec::new();
    for routing in [Routing::Dense, Routing::tsa(0.0)] {
        let m = spread_model(routing);
        let mut rng = StdRng::seed_from_u64(0);
        let soft = block_on(generate(&m, prompt, n, 0.0, Execution::Soft, &mut rng)).unwrap();
        assert_eq!(
            soft.tokens,
            greedy_full(&m, prompt, n, Execution::Soft),
            "{routing:?} soft"
        );
        assert_eq!(
            soft.halting.len(),
            n,
            "{routing:?}: one entry per generated token"
        );
        let ps: Vec<f32> = soft.halting.iter().flatten().copied().collect();
        assert!(
            ps.iter().all(|p| (0.0..=1.0).contains(p)),
            "{routing:?}: p {ps:?}"
        );
        let soft_alpha = match ps.is_empty() {
            true => 1.0,
            false => ps.iter().map(|&p| 1.0 - p as f64).sum::<f64>() / ps.len() as f64,
        };
        assert!(
            (soft.alpha - soft_alpha).abs() < 1e-9,
            "{routing:?}: soft α {}",
            soft.alpha
        );
        let sparse_exec = Execution::Sparse(KeepScale::OneMinusP);
        let sparse = block_on(generate(&m, prompt, n, 0.0, sparse_exec, &mut rng)).unwrap();
        assert_eq!(
            sparse.tokens,
            greedy_full(&m, prompt, n, sparse_exec),
            "{routing:?} sparse"
        );
        // Masking instead of skipping: the same tokens and the same executed α.
        let hard_exec = Execution::Hard(KeepScale::OneMinusP);
        let hard = block_on(generate(&m, prompt, n, 0.0, hard_exec, &mut rng)).unwrap();
        assert_eq!(hard.tokens, sparse.tokens, "{routing:?} hard");
        assert_eq!(hard.alpha, sparse.alpha, "{routing:?} hard α");
        if routing.has_routers() {
            assert_eq!(sparse.halting.len(), n);
            assert!(sparse.halting.iter().all(|p| p.len() == 2));
            alphas.push(sparse.alpha);
        }
    }
    alphas
}

#[test]
fn cached_generation_matches_the_full_forward_pass() {
    let alphas = check_against_full_forward(&[1, 5, 2, 7], 8);
    assert!(alphas[0] < 1.0, "some tokens must halt: α {alphas:?}");
}

/// A prompt longer than the context (prefilled from its last 15 tokens) and a continuation that
/// rolls the caches over three times (each time the recent half of the context is prefilled).
#[test]
fn generation_past_the_context_matches_the_windowed_forward_pass() {
    let prompt: Vec<u32> = (0..21).map(|i| (i * 7 + 3) % 10).collect();
    let alphas = check_against_full_forward(&prompt, 30);
    assert!(alphas[0] < 1.0, "some tokens must halt: α {alphas:?}");
}

#[test]
fn generation_runs_past_the_context_and_refuses_bad_prompts() {
    let device = cpu();
    let m = model(&micro(10, Routing::tsa(0.0)), 4, &device);
    let mut rng = StdRng::seed_from_u64(1);
    let g = block_on(generate(&m, &[3; 20], 30, 1.0, Execution::Soft, &mut rng)).unwrap();
    assert_eq!(
        g.tokens.len(),
        30,
        "context is 16: the cache must roll over"
    );
    assert!(g.tokens.iter().all(|&t| t < 10));
    assert!(block_on(generate(&m, &[], 3, 1.0, Execution::Soft, &mut rng)).is_err());
    assert!(block_on(generate(&m, &[42], 3, 1.0, Execution::Soft, &mut rng)).is_err());
    let exit = Execution::Exit { threshold: 0.9 };
    assert!(block_on(generate(&m, &[3], 3, 1.0, exit, &mut rng)).is_err());
}
