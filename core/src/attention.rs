//! Causal multi-head self-attention (no projection biases).

use burn::module::Module;
use burn::nn::{Dropout, DropoutConfig, Linear};
use burn::tensor::activation::softmax;
use burn::tensor::module::attention;
use burn::tensor::ops::AttentionModuleOptions;
use burn::tensor::{Bool, Device, Int, Tensor, TensorData};

use crate::config::TsaConfig;
use crate::init::{self, Bias};

#[derive(Module, Debug)]
pub struct CausalSelfAttention {
    /// Fused Q, K, V projection, d → 3d.
    pub qkv: Linear,
    /// Output projection d → d: a residual projection, so it gets the scaled init.
    pub proj: Linear,
    pub n_heads: usize,
    /// On the attention probabilities, in training only (then the attention is composed from
    /// matmul and softmax: Burn's fused op has no dropout).
    pub dropout: Dropout,
}

impl CausalSelfAttention {
    pub fn init(c: &TsaConfig, device: &Device) -> Self {
        let d = c.d_model;
        Self {
            qkv: init::unnamed(d, 3 * d, c.init, Bias::None, device),
            proj: init::residual(d, d, c.n_layers, false, device),
            n_heads: c.n_heads,
            dropout: DropoutConfig::new(c.dropout).init(),
        }
    }

    /// `x`: [B, T, d] (already layer-normed) → the attention update Δattn: [B, T, d].
    pub fn forward(&self, x: Tensor<3>) -> Tensor<3> {
        let [b, t, d] = x.dims();
        let hd = d / self.n_heads;
        let heads = |m: Tensor<3>| m.reshape([b, t, self.n_heads, hd]).swap_dims(1, 2);
        let qkv = self.qkv.forward(x);
        let q = heads(qkv.clone().narrow(2, 0, d));
        let k = heads(qkv.clone().narrow(2, d, d));
        let v = heads(qkv.narrow(2, 2 * d, d));

        let y = if self.dropout.prob > 0.0 && q.device().is_autodiff() {
            self.causal_attention_dropout(q, k, v)
        } else {
            causal_attention(q, k, v)
        };
        self.proj.forward(y.swap_dims(1, 2).reshape([b, t, d]))
    }

    /// Training with dropout: softmax(QKᵀ/√d_h + causal mask), dropped, times V.
    fn causal_attention_dropout(&self, q: Tensor<4>, k: Tensor<4>, v: Tensor<4>) -> Tensor<4> {
        let [b, h, t, hd] = q.dims();
        let scores = q.matmul(k.swap_dims(2, 3)).div_scalar((hd as f64).sqrt());
        // `tril_mask` is true strictly above the diagonal: the future.
        let future = Tensor::<2, Bool>::tril_mask([t, t], 0, &scores.device())
            .unsqueeze::<4>()
            .expand([b, h, t, t]);
        let probs = softmax(scores.mask_fill(future, -1e9), 3);
        self.dropout.forward(probs).matmul(v)
    }
}

/// Sequences at least this long run their attention per query range: measured to pay at the
/// paper's T = 256 on flex (`cargo run --release -p tsa-core --example attention_ranges`);
/// shorter ones, the browser presets' contexts included, keep the single call (not measured).
const RANGED_FROM: usize = 256;

/// softmax(QKᵀ/√d_h + causal mask)·V, [B, H, T, d_h] each, through Burn's attention op: a
/// backend may fuse it (flex runs it per (sequence, head) in parallel without materialising
/// [B, H, T, T]); under autodiff it is the same composition of matmul, mask and softmax.
fn causal_attention(q: Tensor<4>, k: Tensor<4>, v: Tensor<4>) -> Tensor<4> {
    let ranges = if q.dims()[2] < RANGED_FROM {
        1
    } else {
        QUERY_RANGES
    };
    causal_attention_in_ranges(q, k, v, ranges)
}

/// The causal attention above, computed in `ranges` query ranges (public for the benchmark
/// example).
///
/// Flex computes every score of the rows it is given, the masked half included, so long
/// sequences go per query range: the queries [lo, hi) need only the keys [0, hi), which skips
/// 3/8 of the score matrix with 4 ranges. Burn's causal mask is aligned bottom-right for a
/// non-square score matrix (flex, the composed fallback and cubek's kernels alike: query i of
/// n sees keys ≤ i + hi − n), so query lo + i sees keys ≤ lo + i as it should.
pub fn causal_attention_in_ranges(
    q: Tensor<4>,
    k: Tensor<4>,
    v: Tensor<4>,
    ranges: usize,
) -> Tensor<4> {
    let t = q.dims()[2];
    if ranges <= 1 {
        return attention(q, k, v, None, None, causal());
    }
    let outs = position_ranges(t, ranges).map(|(lo, hi)| {
        attention(
            q.clone().narrow(2, lo, hi - lo),
            k.clone().narrow(2, 0, hi),
            v.clone().narrow(2, 0, hi),
            None,
            None,
            causal(),
        )
    });
    Tensor::cat(outs.collect(), 2)
}

/// Positions 0..t cut into `n` consecutive ranges [lo, hi) of equal length (the last shorter).
fn position_ranges(t: usize, n: usize) -> impl Iterator<Item = (usize, usize)> {
    let len = t.div_ceil(n).max(1);
    (0..t).step_by(len).map(move |lo| (lo, (lo + len).min(t)))
}

/// Long sequences (and the extended mode, always) split into this many position ranges: a query
/// in range c only needs the keys before the range's end, so most of the masked upper triangle
/// is never computed (flex's attention computes every score of the rows it is given).
const QUERY_RANGES: usize = 4;

impl CausalSelfAttention {
    /// Extended sparse mode (beyond the paper): the attention update of the kept query rows only.
    /// K and V are computed for every token (later tokens attend to them); Q, the score rows and
    /// the output projection only for the kept rows: `keep`, their ascending flat indices into
    /// B·T, and `positions[b]`, the same rows as positions within sequence b. Returns [k, d] in
    /// `keep`'s order. At least one row must be kept (the block skips the call when none is).
    pub fn forward_rows(
        &self,
        x: Tensor<3>,
        keep: Tensor<1, Int>,
        positions: &[Vec<i64>],
    ) -> Tensor<2> {
        let [b, t, d] = x.dims();
        let (nh, hd) = (self.n_heads, d / self.n_heads);
        let device = x.device();
        let ints = |v: Vec<i64>| {
            let n = v.len();
            Tensor::<1, Int>::from_data(TensorData::new(v, [n]), &device)
        };
        let w = self.qkv.weight.val(); // [d, 3d]: Q | K | V columns, no bias
        let flat = x.reshape([b * t, d]);
        let kv = flat.clone().matmul(w.clone().narrow(1, d, 2 * d));
        let heads = |m: Tensor<2>, rows: usize| m.reshape([b, rows, nh, hd]).swap_dims(1, 2);
        let k = heads(kv.clone().narrow(1, 0, d), t);
        let v = heads(kv.narrow(1, d, d), t);
        // Q for the kept rows only, in output order; sequence s's rows start at first[s].
        let q_all = flat.select(0, keep).matmul(w.narrow(1, 0, d));
        let first: Vec<usize> = positions
            .iter()
            .scan(0, |n, pos| {
                let at = *n;
                *n += pos.len();
                Some(at)
            })
            .collect();

        // One attention call per position range, over the batch: each sequence's kept queries in
        // the range padded to the longest run (a padding slot reads Q row 0, sees every key and
        // is dropped), keys cut at the range's end, and the causal mask per row.
        let (mut outs, mut order) = (Vec::new(), Vec::new());
        for (lo, hi) in position_ranges(t, QUERY_RANGES) {
            let in_range: Vec<(usize, usize)> = positions
                .iter()
                .map(|pos| {
                    let from = pos.partition_point(|&p| p < lo as i64);
                    (from, pos.partition_point(|&p| p < hi as i64))
                })
                .collect();
            let n_max = in_range.iter().map(|(a, z)| z - a).max().unwrap_or(0);
            if n_max == 0 {
                continue;
            }
            let (mut rows, mut query_pos, mut kept) = (Vec::new(), Vec::new(), Vec::new());
            for (s, &(a, z)) in in_range.iter().enumerate() {
                for i in 0..n_max {
                    if a + i < z {
                        let row = (first[s] + a + i) as i64;
                        kept.push((s * n_max + i) as i64);
                        order.push(row);
                        rows.push(row);
                        query_pos.push(positions[s][a + i]);
                    } else {
                        rows.push(0);
                        query_pos.push(hi as i64 - 1);
                    }
                }
            }
            let q = q_all
                .clone()
                .select(0, ints(rows))
                .reshape([b, n_max, nh, hd])
                .swap_dims(1, 2);
            // Compared once per sequence, then given at the op's documented full shape (not every
            // backend broadcasts a mask over heads).
            let shape = [b, 1, n_max, hi];
            let key_pos = Tensor::<1, Int>::arange(0..hi as i64, &device).reshape([1, 1, 1, hi]);
            let future = key_pos
                .expand(shape)
                .greater(ints(query_pos).reshape([b, 1, n_max, 1]).expand(shape))
                .expand([b, nh, n_max, hi]);
            let y = attention(
                q,
                k.clone().narrow(2, 0, hi),
                v.clone().narrow(2, 0, hi),
                Some(future),
                None,
                AttentionModuleOptions::default(),
            );
            outs.push(
                y.swap_dims(1, 2)
                    .reshape([b * n_max, d])
                    .select(0, ints(kept)),
            );
        }
        // Back from range order to sequence order: row j of `y` is output row order[j].
        let mut inverse = vec![0i64; order.len()];
        for (j, &o) in order.iter().enumerate() {
            inverse[o as usize] = j as i64;
        }
        let y = Tensor::cat(outs, 0).select(0, ints(inverse));
        self.proj.forward(y)
    }
}

/// Scale 1/√d_h (Burn's default) with the causal mask: query i sees keys j ≤ i.
fn causal() -> AttentionModuleOptions {
    AttentionModuleOptions {
        is_causal: true,
        ..Default::default()
    }
}
