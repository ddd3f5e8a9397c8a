//! The paper's compute and quality metrics (§2.4, §2.5).

use burn::tensor::Tensor;

/// Active fraction (§2.5): α = (1/(L−1)) Σ_l mean(1 − p_l), the mean over routers of the share
/// of each block's update that tokens received. `active[l]` is 1 − p_l (soft) or the executed
/// 0/1 mask (hard). `None` when there are no routers (α = 1 by definition).
pub fn alpha(active: &[Tensor<2>]) -> Option<Tensor<1>> {
    let n = active.len();
    active
        .iter()
        .map(|a| a.clone().mean())
        .reduce(|acc, m| acc + m)
        .map(|sum| sum.div_scalar(n as f64))
}

/// Executed active fraction: the share of token-layers that run under the inference rule
/// p_l ≤ 0.5, from the halting probabilities of every router. `None` without routers.
pub fn executed_alpha(halting: &[Tensor<2>]) -> Option<Tensor<1>> {
    let kept: Vec<Tensor<2>> = halting
        .iter()
        .map(|p| crate::routing::kept(p.clone()).float())
        .collect();
    alpha(&kept)
}

/// Indecision: the mean over routers and tokens of 4·p_l(1 − p_l) — 1 when every p sits on
/// the threshold 0.5, 0 when every decision is sure. The commitment term is β times this.
/// `None` without routers.
pub fn indecision(halting: &[Tensor<2>]) -> Option<Tensor<1>> {
    let spread: Vec<Tensor<2>> = halting
        .iter()
        .map(|p| (p.clone() * (p.clone().neg() + 1.0)).mul_scalar(4.0))
        .collect();
    alpha(&spread)
}

/// Bins of the halting-probability histogram: [0, 0.1), …, [0.9, 1].
pub const HIST_BINS: usize = 10;

/// Per router, the share of tokens whose p_l falls in each of [`HIST_BINS`] equal bins of
/// [0, 1]: [routers, bins]. A router that decides is bimodal; one that hovers near its initial
/// σ(−1) ≈ 0.27 fills one bin. Computed on the device (comparisons, no sort, no host read).
pub fn halting_histogram(halting: &[Tensor<2>]) -> Option<Tensor<2>> {
    let rows: Vec<Tensor<1>> = halting
        .iter()
        .map(|p| {
            let bin = p
                .clone()
                .mul_scalar(HIST_BINS as f64)
                .floor()
                .clamp(0.0, (HIST_BINS - 1) as f64);
            let counts: Vec<Tensor<1>> = (0..HIST_BINS)
                .map(|k| bin.clone().equal_elem(k as f64).float().mean())
                .collect();
            Tensor::cat(counts, 0)
        })
        .collect();
    (!rows.is_empty()).then(|| Tensor::stack(rows, 0))
}

/// The same bins for probabilities already read to the host: the share of `p` in each tenth of
/// [0, 1] (all zero for an empty slice).
pub fn histogram(p: &[f32]) -> Vec<f64> {
    let mut bins = vec![0.0; HIST_BINS];
    for &v in p {
        let k = ((v as f64) * HIST_BINS as f64)
            .floor()
            .clamp(0.0, (HIST_BINS - 1) as f64);
        bins[k as usize] += 1.0 / p.len() as f64;
    }
    bins
}

/// Depth regularisation (§2.4): L_depth = λ · α.
pub fn depth_loss(lambda: f64, active: &[Tensor<2>]) -> Option<Tensor<1>> {
    alpha(active).map(|a| a.mul_scalar(lambda))
}

/// Share of all token-layer operations saved: (L−1)(1−α)/L. The stem always runs, so α = 0.726
/// at L = 6 saves 22.8% and α = 0.341 saves 54.9%, as in Tables 1 and 2.
pub fn tlops_saved(alpha: f64, n_layers: usize) -> f64 {
    if n_layers == 0 {
        return 0.0;
    }
    (n_layers as f64 - 1.0) * (1.0 - alpha) / n_layers as f64
}

/// Blocks run per token at α: L·(1 − TLOps saved) = 1 + (L−1)·α (the stem always runs). What
/// compares a routed model with a dense one of another depth.
pub fn blocks_run(alpha: f64, n_layers: usize) -> f64 {
    n_layers as f64 * (1.0 - tlops_saved(alpha, n_layers))
}

/// Bits per character from a loss in nats.
pub fn bpc(loss_nats: f64) -> f64 {
    loss_nats / std::f64::consts::LN_2
}
