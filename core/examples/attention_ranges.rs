//! Times causal attention at the paper's shape ([64, 8, 256, 32] on flex) computed whole and
//! in 4 and 8 query ranges (what `RANGED_FROM` in `attention.rs` chooses between). Prints the
//! best of 15 interleaved rounds: the minimum is the least disturbed by other work on the machine.

use std::time::Instant;

use burn::tensor::{Device, Distribution, Tensor};
use tsa_core::attention::causal_attention_in_ranges;

fn main() {
    let device = Device::flex();
    let (b, h, t, hd) = (64, 8, 256, 32);
    // [B, T, H, d_h] viewed as [B, H, T, d_h], like the heads split in the model.
    let heads = || {
        Tensor::<4>::random([b, t, h, hd], Distribution::Normal(0.0, 1.0), &device).swap_dims(1, 2)
    };
    let (q, k, v) = (heads(), heads(), heads());
    let ranges = [1, 4, 8];
    let mut best = [f64::MAX; 3];
    for _ in 0..15 {
        for (i, &r) in ranges.iter().enumerate() {
            let start = Instant::now();
            let y = causal_attention_in_ranges(q.clone(), k.clone(), v.clone(), r);
            let _ = y.into_data();
            best[i] = best[i].min(start.elapsed().as_secs_f64() * 1e3);
        }
    }
    println!("causal attention [{b}, {h}, {t}, {hd}] on flex, best of 15 rounds:");
    for (r, ms) in ranges.iter().zip(best) {
        println!("  {r} range(s): {ms:.1} ms");
    }
}
