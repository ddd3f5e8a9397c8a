use burn::tensor::{Tensor, TensorData};
use tsa_core::metrics::{alpha, bpc, depth_loss, tlops_saved};

use crate::common::*;

#[test]
fn alpha_is_the_mean_over_routers_of_the_mean_active_share() {
    let device = cpu();
    // Router 0: 1 − p = [1, 0.5, 0, 0.5] (mean 0.5); router 1: [1, 1, 1, 0] (mean 0.75).
    let g0 = Tensor::<2>::from_data(
        TensorData::new(vec![1.0f32, 0.5, 0.0, 0.5], [2, 2]),
        &device,
    );
    let g1 = Tensor::<2>::from_data(
        TensorData::new(vec![1.0f32, 1.0, 1.0, 0.0], [2, 2]),
        &device,
    );
    let a = floats(alpha(&[g0.clone(), g1.clone()]).unwrap())[0];
    assert!((a - 0.625).abs() < 1e-6, "α = {a}");
    let d = floats(depth_loss(0.1, &[g0, g1]).unwrap())[0];
    assert!((d - 0.0625).abs() < 1e-6, "L_depth = {d}");
    assert!(
        alpha(&[]).is_none(),
        "no routers: α is 1 by definition, not a mean of nothing"
    );
}

#[test]
fn tlops_saved_counts_the_stem_as_always_active() {
    // Table 2: α = 0.726 → 22.8%; Table 1: α = 0.341 → 54.9%, α = 0.730 → 22.5%; Table 3: 0.833 → 13.9%.
    let pct = |a: f64| (tlops_saved(a, 6) * 1000.0).round() / 10.0;
    assert_eq!(pct(0.726), 22.8);
    assert_eq!(pct(0.341), 54.9);
    assert_eq!(pct(0.730), 22.5);
    assert_eq!(pct(0.833), 13.9);
    assert_eq!(tlops_saved(1.0, 6), 0.0);
}

#[test]
fn bpc_is_loss_over_ln2() {
    // Table 2: val loss 1.4422 ↔ BPC 2.0807.
    assert!((bpc(1.4422) - 2.0807).abs() < 1e-4);
}
