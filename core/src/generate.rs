//! Autoregressive generation with a KV cache, one token at a time, soft or sparse.
//!
//! In sparse mode a token whose router says p_l > 0.5 only computes its keys and values at block
//! l+1 (later tokens attend to them) and skips the rest of the block: at batch 1 that is real
//! skipped work with no gather/scatter at all.

use burn::tensor::activation::softmax;
use burn::tensor::{Int, Tensor, TensorData};
use rand::RngExt;
use rand::rngs::StdRng;

use crate::block::Block;
use crate::config::Routing;
use crate::error::{Result, TsaError};
use crate::model::TsaModel;
use crate::read;
use crate::routing::HALT_THRESHOLD;

/// Keys and values of every block for the tokens so far: [1, H, t, hd] each.
#[derive(Default)]
struct Cache {
    kv: Vec<Option<(Tensor<4>, Tensor<4>)>>,
    len: usize,
}

/// A generated continuation and what the routers did at each generated token.
#[derive(Debug, Clone, Default)]
pub struct Generation {
    pub tokens: Vec<u32>,
    /// Per generated token, p_l at each router (empty without routers).
    pub halting: Vec<Vec<f32>>,
    /// Share of routed block updates that ran (1 − p soft; the executed share when sparse).
    pub alpha: f64,
}

impl Block {
    /// One new token `h` [1, 1, d] through this block. `gate` scales the updates; `None` means
    /// the token is halted: it appends its K/V to the cache and leaves `h` as it is.
    fn step(
        &self,
        h: Tensor<3>,
        gate: Option<Tensor<3>>,
        cache: &mut Option<(Tensor<4>, Tensor<4>)>,
    ) -> Tensor<3> {
        let [_, _, d] = h.dims();
        let nh = self.attn.n_heads;
        let hd = d / nh;
        let x = self.ln_attn.forward(h.clone());
        let w = self.attn.qkv.weight.val();
        let heads = |m: Tensor<3>| m.reshape([1, 1, nh, hd]).swap_dims(1, 2);
        let kv = x
            .clone()
            .matmul(w.clone().narrow(1, d, 2 * d).unsqueeze::<3>());
        let (k, v) = (heads(kv.clone().narrow(2, 0, d)), heads(kv.narrow(2, d, d)));
        let (k, v) = match cache.take() {
            Some((ck, cv)) => (Tensor::cat(vec![ck, k], 2), Tensor::cat(vec![cv, v], 2)),
            None => (k, v),
        };
        *cache = Some((k.clone(), v.clone()));
        let Some(g) = gate else { return h };

        let q = heads(x.matmul(w.narrow(1, 0, d).unsqueeze::<3>()));
        let att = softmax(
            q.matmul(k.swap_dims(2, 3)).div_scalar((hd as f64).sqrt()),
            3,
        );
        let y = self
            .attn
            .proj
            .forward(att.matmul(v).swap_dims(1, 2).reshape([1, 1, d]));
        let h = h + g.clone() * y;
        h.clone() + g * self.ffn.forward(self.ln_ffn.forward(h))
    }
}

impl TsaModel {
    /// Appends `n` sampled tokens to `prompt` (temperature 0: greedy). When the context fills,
    /// the cache is rebuilt from the most recent half of it. `sparse` applies the halting
    /// threshold (TSA/MoD: p > 0.5 skips the block); otherwise gates are soft.
    pub async fn generate(
        &self,
        prompt: &[u32],
        n: usize,
        temperature: f64,
        sparse: bool,
        rng: &mut StdRng,
    ) -> Result<Generation> {
        if prompt.is_empty() {
            return Err(TsaError::InvalidConfig(
                "generation needs a prompt of at least one token".into(),
            ));
        }
        if let Some(&bad) = prompt
            .iter()
            .find(|&&t| t as usize >= self.config.vocab_size)
        {
            return Err(TsaError::UnknownToken(bad));
        }
        let mut history: Vec<u32> = prompt.to_vec();
        let mut cache = Cache::default();
        let mut out = Generation::default();
        let (mut active, mut decisions) = (0.0, 0usize);
        // Prefill all but the last prompt token; each step feeds one token and predicts the next.
        let keep = self.config.context;
        let start = history.len().saturating_sub(keep);
        for &t in &history[start..history.len() - 1] {
            self.token_step(t, &mut cache, sparse).await?;
        }
        for _ in 0..n {
            if cache.len >= keep {
                cache = Cache::default();
                let recent = history.len().saturating_sub(keep / 2);
                for &t in &history[recent..history.len() - 1] {
                    self.token_step(t, &mut cache, sparse).await?;
                }
            }
            let last = history[history.len() - 1];
            let (logits, p) = self.token_step(last, &mut cache, sparse).await?;
            let next = sample(&logits, temperature, rng);
            for &pl in &p {
                active += if sparse {
                    f64::from(u8::from(pl as f64 <= HALT_THRESHOLD))
                } else {
                    1.0 - pl as f64
                };
                decisions += 1;
            }
            out.halting.push(p);
            out.tokens.push(next);
            history.push(next);
        }
        out.alpha = if decisions == 0 {
            1.0
        } else {
            active / decisions as f64
        };
        Ok(out)
    }

    /// Feeds one token at the next position: its next-token logits and halting probabilities.
    async fn token_step(
        &self,
        token: u32,
        cache: &mut Cache,
        sparse: bool,
    ) -> Result<(Vec<f32>, Vec<f32>)> {
        let device = self.device();
        if cache.kv.is_empty() {
            cache.kv = vec![None; self.blocks.len()];
        }
        let pos = cache.len;
        let x = Tensor::<2, Int>::from_data(TensorData::new(vec![token as i32], [1, 1]), &device);
        let mut h = self.tok_emb.forward(x) + self.pos_emb.val().narrow(0, pos, 1).unsqueeze::<3>();
        let one = || Some(Tensor::<3>::ones([1, 1, 1], &device));
        h = self.blocks[0].step(h, one(), &mut cache.kv[0]);
        let mut halting = Vec::new();
        for l in 0..self.config.n_routers() {
            let gate = match self.config.routing {
                Routing::Tsa { .. } | Routing::MixtureOfDepths { .. } => {
                    let p = self.routers[l].forward(h.clone());
                    let pv = read::floats(p.clone()).await?[0];
                    halting.push(pv);
                    let kept = (pv as f64) <= HALT_THRESHOLD;
                    // Kept tokens are scaled as training saw them: 1 − p, or 1 for hard gates.
                    let soft = p.neg().add_scalar(1.0).unsqueeze_dim::<3>(2);
                    let scale = match self.config.routing.keep_scale() {
                        crate::KeepScale::One => Tensor::<3>::ones([1, 1, 1], &device),
                        crate::KeepScale::OneMinusP => soft.clone(),
                    };
                    match (sparse, &self.config.routing) {
                        (true, _) => kept.then_some(scale),
                        // Soft generation of a hard-gated TSA is its training forward: hard.
                        (false, Routing::Tsa { gate, .. })
                            if *gate != crate::config::TsaGate::Soft =>
                        {
                            Some(scale.mul_scalar(f32::from(u8::from(kept))))
                        }
                        (false, _) => Some(soft),
                    }
                }
                _ => one(),
            };
            h = self.blocks[l + 1].step(h, gate, &mut cache.kv[l + 1]);
        }
        cache.len += 1;
        let w = self.tok_emb.weight.val();
        let logits = self
            .ln_f
            .forward(h)
            .reshape([1, self.config.d_model])
            .matmul(w.transpose());
        Ok((read::floats(logits).await?, halting))
    }
}

fn sample(logits: &[f32], temperature: f64, rng: &mut StdRng) -> u32 {
    let argmax = || {
        logits
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.total_cmp(b.1))
            .map_or(0, |(i, _)| i as u32)
    };
    if temperature <= 0.0 {
        return argmax();
    }
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let weights: Vec<f64> = logits
        .iter()
        .map(|&l| ((l as f64 - max) / temperature).exp())
        .collect();
    let total: f64 = weights.iter().sum();
    let mut u = rng.random_range(0.0..total);
    for (i, w) in weights.iter().enumerate() {
        if u < *w {
            return i as u32;
        }
        u -= w;
    }
    argmax()
}
