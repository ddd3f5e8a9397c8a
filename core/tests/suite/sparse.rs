use burn::tensor::{Bool, Tensor, TensorData};
use proptest::prelude::*;
use tsa_core::block::Block;
use tsa_core::gate::Gate;
use tsa_core::sparse::keep_indices;

use crate::common::*;

/// Runs one block on `device` with a hard gate (gather/scatter FFN) and with the same gate
/// applied densely. On plain flex the extended mode's attention is `fused_attention`'s kernel;
/// under autodiff flex runs Burn's ops instead (the path of a GPU without the device kernels).
#[allow(clippy::too_many_arguments)]
fn hard_vs_masked(
    device: &burn::tensor::Device,
    b: usize,
    t: usize,
    d: usize,
    keep: Vec<bool>,
    scale: Vec<f32>,
    seed: u64,
    extended: bool,
) -> f32 {
    let device = device.clone();
    device.seed(seed);
    let block = Block::init(&shape(d, 2, 2 * d, 3), &device);
    let h = Tensor::<3>::random(
        [b, t, d],
        burn::tensor::Distribution::Normal(0.0, 1.0),
        &device,
    );
    let keep_t = Tensor::<2, Bool>::from_data(TensorData::new(keep.clone(), [b, t]), &device);
    let raw = Tensor::<2>::from_data(TensorData::new(scale, [b, t]), &device);
    let scale = (raw * keep_t.clone().float()).unsqueeze_dim::<3>(2);
    let keep = keep_indices(keep_t);
    let queries = extended.then(|| tsa_core::sparse::positions_per_sequence(&keep, b, t));
    let hard = block.forward(
        h.clone(),
        &Gate::Hard {
            keep,
            scale: scale.clone(),
            queries,
        },
        None,
    );
    let dense = block.forward(h, &Gate::Soft(scale), None);
    max_abs_diff(&floats(hard), &floats(dense))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    #[test]
    fn sparse_block_equals_hard_masked_dense_block(
        b in 1usize..4, t in 1usize..12, half_d in 2usize..9,
        seed in any::<u64>(), bits in proptest::collection::vec(any::<bool>(), 48),
        scales in proptest::collection::vec(0.0f32..1.0, 48),
    ) {
        let d = 2 * half_d;
        let n = b * t;
        for extended in [false, true] {
            let diff = hard_vs_masked(&cpu(), b, t, d, bits[..n].to_vec(), scales[..n].to_vec(), seed, extended);
            prop_assert!(diff < 1e-5, "extended={extended}: max |sparse − masked dense| = {diff}");
        }
    }
}

#[test]
fn extended_mode_over_uneven_position_ranges_equals_the_masked_dense_block() {
    // Through Burn's ops the extended mode runs attention per position range (keys cut at the
    // range's end); at t = 37 the ranges are 10, 10, 10 and 7 long. The fused kernel (plain
    // flex) cuts blocks of 32 kept queries instead. One sequence keeps nothing, one everything,
    // one a scattered pattern with nothing in the first range.
    let (b, t) = (3, 37);
    let mut keep = vec![false; t];
    keep.extend(vec![true; t]);
    keep.extend((0..t).map(|i| i >= 10 && (i % 3 == 0 || i == 36)));
    let scale: Vec<f32> = (0..b * t).map(|i| 0.1 + (i % 7) as f32 / 10.0).collect();
    for device in [cpu(), cpu().autodiff()] {
        let diff = hard_vs_masked(&device, b, t, 12, keep.clone(), scale.clone(), 5, true);
        let path = if device.is_autodiff() {
            "Burn's ops"
        } else {
            "fused"
        };
        assert!(
            diff < 1e-5,
            "{path}: max |extended − masked dense| = {diff}"
        );
    }
}

#[test]
fn sparse_block_with_nothing_halted_equals_the_dense_block() {
    let device = cpu();
    device.seed(1);
    let block = Block::init(&shape(16, 2, 32, 3), &device);
    let h = Tensor::<3>::random(
        [2, 5, 16],
        burn::tensor::Distribution::Normal(0.0, 1.0),
        &device,
    );
    let all = Tensor::<2, Bool>::from_data(TensorData::new(vec![true; 10], [2, 5]), &device);
    let hard = block.forward(
        h.clone(),
        &Gate::Hard {
            keep: keep_indices(all),
            scale: Tensor::ones([2, 5, 1], &device),
            queries: None,
        },
        None,
    );
    let dense = block.forward(h, &Gate::Open, None);
    assert!(max_abs_diff(&floats(hard), &floats(dense)) < 1e-6);
}

#[test]
fn everything_halted_leaves_the_state_unchanged() {
    let device = cpu();
    let block = Block::init(&shape(16, 2, 32, 3), &device);
    let h = Tensor::<3>::random(
        [1, 4, 16],
        burn::tensor::Distribution::Normal(0.0, 1.0),
        &device,
    );
    let none = Tensor::<2, Bool>::from_data(TensorData::new(vec![false; 4], [1, 4]), &device);
    let out = block.forward(
        h.clone(),
        &Gate::Hard {
            keep: keep_indices(none),
            scale: Tensor::zeros([1, 4, 1], &device),
            queries: None,
        },
        None,
    );
    assert_eq!(floats(out), floats(h));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]
    #[test]
    fn top_k_mask_matches_a_sort(w in proptest::collection::vec(0u8..6, 1..20), k_frac in 0.05f64..1.0) {
        // Small integer weights make ties common; ties go to the earlier position.
        let t = w.len();
        let k = tsa_core::routing::capacity_k(k_frac, t);
        let device = cpu();
        let wt = Tensor::<2>::from_data(TensorData::new(w.iter().map(|&x| x as f32).collect::<Vec<_>>(), [1, t]), &device);
        let got = floats(tsa_core::routing::top_k_mask(wt, k));
        let mut order: Vec<usize> = (0..t).collect();
        order.sort_by(|&i, &j| w[j].cmp(&w[i]).then(i.cmp(&j)));
        let mut want = vec![0.0f32; t];
        for &i in &order[..k] { want[i] = 1.0; }
        prop_assert_eq!(got, want);
    }
}
