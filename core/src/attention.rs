//! Causal multi-head self-attention (no projection biases), over a whole sequence or, with a
//! [`KvCache`], over the new tokens against every earlier one.

use burn::backend::DispatchDevice;
use burn::module::Module;
use burn::nn::{Dropout, DropoutConfig, Linear};
use burn::tensor::activation::softmax;
use burn::tensor::module::attention;
use burn::tensor::ops::AttentionModuleOptions;
use burn::tensor::{Bool, Device, Tensor, TensorData};

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

/// Keys and values of the tokens seen so far (generation), in buffers [B, H, C, d_h] of a fixed
/// capacity C: every step has the same shapes, so a cubecl device (wgpu, CUDA, the browser's
/// WebGPU) compiles its kernels once rather than once per cache length (a cache grown by
/// concatenation cost ~16 s of compilation over a context's worth of tokens on lavapipe). A step
/// attends over the whole buffers and masks the positions not yet written.
#[derive(Debug, Clone)]
pub struct KvCache {
    capacity: usize,
    len: usize,
    kv: Option<(Tensor<4>, Tensor<4>)>,
}

impl KvCache {
    /// An empty cache for up to `capacity` tokens (the model's context); the buffers are
    /// allocated on first use, on the device and with the shape of the keys they receive.
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity,
            len: 0,
            kv: None,
        }
    }

    /// Writes the new tokens' `k`, `v` [B, H, n, d_h] after the cached ones; returns the
    /// buffers.
    ///
    /// Panics past the capacity: the caller (`generate`) rolls the cache over before that.
    fn write(&mut self, k: Tensor<4>, v: Tensor<4>) -> (Tensor<4>, Tensor<4>) {
        let [b, h, n, hd] = k.dims();
        let (start, c) = (self.len, self.capacity);
        assert!(
            start + n <= c,
            "a KV cache of capacity {c} holds {start} tokens and cannot take {n} more"
        );
        let (ck, cv) = self.kv.take().unwrap_or_else(|| {
            let zeros = || Tensor::zeros([b, h, c, hd], &k.device());
            (zeros(), zeros())
        });
        let at = [0..b, 0..h, start..start + n, 0..hd];
        let (ck, cv) = (ck.slice_assign(at.clone(), k), cv.slice_assign(at, v));
        self.kv = Some((ck.clone(), cv.clone()));
        self.len += n;
        (ck, cv)
    }

    /// What the last `n` tokens written attend to in the buffers `k`, `v`: all of them, with the
    /// mask [B, H, n, C] (true: not visible) that hides from the i-th of them the positions after
    /// its own — the same shapes at every generation step. A prefill (n > 1: the prompt, or the recent half of
    /// the context after a roll-over) on a device that computes masked scores (flex) attends to
    /// the positions written only, under the causal mask: fewer scores, and on flex a shape
    /// costs nothing.
    fn visible(&self, k: Tensor<4>, v: Tensor<4>, n: usize) -> Visible {
        let ([b, h, c, _], device) = (k.dims(), k.device());
        if n > 1 && computes_masked_scores(&device) {
            let (k, v) = (k.narrow(2, 0, self.len), v.narrow(2, 0, self.len));
            return Visible { k, v, hidden: None };
        }
        // The same rows for every sequence and head: a full-shape mask, as broadcasting one is
        // not taken by every backend's kernel.
        let mut rows = vec![true; n * c];
        for (i, row) in rows.chunks_mut(c).enumerate() {
            row[..=self.len - n + i].fill(false);
        }
        let mask = TensorData::new(rows.repeat(b * h), [b, h, n, c]);
        let hidden = Some(Tensor::from_data(mask, &device));
        Visible { k, v, hidden }
    }

    /// Tokens cached.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Forgets every token, keeping the buffers (the mask hides what is left in them).
    pub fn clear(&mut self) {
        self.len = 0;
    }
}

/// What new tokens attend to in a [`KvCache`] (`KvCache::visible`): keys and values
/// [B, H, S, d_h], and the mask of the positions each must not see — or none: the new tokens are
/// the last of the S (the causal mask).
struct Visible {
    k: Tensor<4>,
    v: Tensor<4>,
    hidden: Option<Tensor<4, Bool>>,
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

    /// `x`: [B, T, d] (already layer-normed) → the attention update Δattn: [B, T, d]. With a
    /// cache, the T new tokens also attend to the cached ones and join the cache.
    pub fn forward(&self, x: Tensor<3>, cache: Option<&mut KvCache>) -> Tensor<3> {
        let [b, t, d] = x.dims();
        let qkv = self.qkv.forward(x);
        #[cfg(not(target_family = "wasm"))]
        if cache.is_none() && crate::fused_attention::applies(&qkv) {
            let y = crate::fused_attention::causal_attention(qkv, self.n_heads);
            return self.proj.forward(y);
        }
        let q = self.heads(qkv.clone().narrow(2, 0, d));
        let k = self.heads(qkv.clone().narrow(2, d, d));
        let v = self.heads(qkv.narrow(2, 2 * d, d));
        let y = if let Some(cache) = cache {
            let (k, v) = cache.write(k, v);
            match cache.visible(k, v, t) {
                Visible { k, v, hidden: None } => causal_attention(q, k, v),
                Visible { k, v, hidden } => attention(q, k, v, hidden, None, Default::default()),
            }
        } else if self.dropout.prob > 0.0 && q.device().is_autodiff() {
            self.causal_attention_dropout(q, k, v)
        } else {
            causal_attention(q, k, v)
        };
        self.proj.forward(y.swap_dims(1, 2).reshape([b, t, d]))
    }

    /// Only the keys and values of `x` [B, T, d] (already layer-normed), appended to `cache`:
    /// what a halted token still owes the tokens after it.
    /// The whole Q|K|V projection runs and Q is dropped: multiplying by the K|V columns alone
    /// made flex copy those columns of the weight out on every call (12% of sparse sampling).
    pub fn cache_kv(&self, x: Tensor<3>, cache: &mut KvCache) {
        let d = x.dims()[2];
        let qkv = self.qkv.forward(x);
        cache.write(
            self.heads(qkv.clone().narrow(2, d, d)),
            self.heads(qkv.narrow(2, 2 * d, d)),
        );
    }

    /// [B, T, d] → [B, H, T, d_h].
    fn heads(&self, m: Tensor<3>) -> Tensor<4> {
        let [b, t, d] = m.dims();
        m.reshape([b, t, self.n_heads, d / self.n_heads])
            .swap_dims(1, 2)
    }

    /// Training with dropout: softmax(QKᵀ/√d_h + causal mask), dropped, times V (no cache in
    /// training, so the scores are square).
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

/// Sequences at least this long run their attention per query range on flex when it goes through
/// Burn's op (training, and the browser; inference natively takes `fused_attention`, which
/// skips the masked triangle by itself): measured to pay at
/// the paper's T = 256 (`cargo run --release -p tsa-core --example attention_ranges`); shorter
/// ones, the browser presets' contexts included, keep the single call (not measured). Cubecl
/// devices (wgpu, CUDA) always make one call: Burn's flash kernel already skips the tiles above
/// the causal diagonal, so ranges there would only add launches, K/V slices and a concatenation.
const RANGED_FROM: usize = 256;

/// Long sequences (and the extended mode, always) split into this many position ranges: a query
/// in range c only needs the keys before the range's end, so most of the masked upper triangle
/// is never computed (flex's attention computes every score of the rows it is given).
pub(crate) const QUERY_RANGES: usize = 4;

/// softmax(QKᵀ/√d_h + causal mask)·V for queries [B, H, T, d_h] that are the last T of the keys
/// [B, H, S, d_h], through Burn's attention op: a backend may fuse it (flex runs it per
/// (sequence, head) in parallel without materialising [B, H, T, S]); under autodiff it is the
/// same composition of matmul, mask and softmax.
fn causal_attention(q: Tensor<4>, k: Tensor<4>, v: Tensor<4>) -> Tensor<4> {
    let ranges = if q.dims()[2] < RANGED_FROM || !computes_masked_scores(&q.device()) {
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
/// sequences go per query range: the queries [lo, hi) need only the keys before query hi. Burn's
/// causal mask is aligned bottom-right for a non-square score matrix (flex, the composed
/// fallback and cubek's kernels alike: query i of n sees keys ≤ i + s − n): the T queries are
/// the last T of the S keys.
pub fn causal_attention_in_ranges(
    q: Tensor<4>,
    k: Tensor<4>,
    v: Tensor<4>,
    ranges: usize,
) -> Tensor<4> {
    let (t, s) = (q.dims()[2], k.dims()[2]);
    if ranges <= 1 {
        return attention(q, k, v, None, None, causal());
    }
    let before = s - t; // cached keys ahead of the first query
    let outs = position_ranges(t, ranges).map(|(lo, hi)| {
        attention(
            q.clone().narrow(2, lo, hi - lo),
            k.clone().narrow(2, 0, before + hi),
            v.clone().narrow(2, 0, before + hi),
            None,
            None,
            causal(),
        )
    });
    Tensor::cat(outs.collect(), 2)
}

/// Whether `device`'s attention computes the masked scores too (flex, and any non-cubecl
/// backend), so that cutting the queries into ranges saves work.
pub(crate) fn computes_masked_scores(device: &Device) -> bool {
    !matches!(device.as_dispatch(), DispatchDevice::Cube(_))
}

/// Positions 0..t cut into `n` consecutive ranges [lo, hi) of equal length (the last shorter).
pub(crate) fn position_ranges(t: usize, n: usize) -> impl Iterator<Item = (usize, usize)> {
    let len = t.div_ceil(n).max(1);
    (0..t).step_by(len).map(move |lo| (lo, (lo + len).min(t)))
}

/// Scale 1/√d_h (Burn's default) with the causal mask: query i sees keys j ≤ i.
fn causal() -> AttentionModuleOptions {
    AttentionModuleOptions {
        is_causal: true,
        ..Default::default()
    }
}
