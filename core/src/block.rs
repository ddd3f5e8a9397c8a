//! A pre-norm transformer block whose two residual updates are scaled by a per-token gate:
//! `h ← h + g ⊙ Δattn(h)`, `h ← h + g ⊙ Δffn(h)` (paper §2.3, with g = 1 − p_l).

use burn::module::Module;
use burn::nn::{LayerNorm, LayerNormConfig};
use burn::tensor::{Device, Tensor};

use crate::attention::{CausalSelfAttention, KvCache};
use crate::config::TsaConfig;
use crate::ffn::Ffn;
use crate::gate::Gate;
use crate::sparse;

#[derive(Module, Debug)]
pub struct Block {
    pub ln_attn: LayerNorm,
    pub attn: CausalSelfAttention,
    pub ln_ffn: LayerNorm,
    pub ffn: Ffn,
}

impl Block {
    pub fn init(c: &TsaConfig, device: &Device) -> Self {
        Self {
            ln_attn: LayerNormConfig::new(c.d_model).init(device),
            attn: CausalSelfAttention::init(c, device),
            ln_ffn: LayerNormConfig::new(c.d_model).init(device),
            ffn: Ffn::init(c, device),
        }
    }

    /// `h`: [B, T, d] → [B, T, d]. With a cache (generation), the T tokens follow the cached
    /// ones; a hard gate runs whole sequences and takes none.
    pub fn forward(&self, h: Tensor<3>, gate: &Gate, cache: Option<&mut KvCache>) -> Tensor<3> {
        let scaled = |u: Tensor<3>| match gate {
            Gate::Soft(g) => g.clone() * u,
            _ => u,
        };
        match gate {
            Gate::Open | Gate::Soft(_) => {
                let h = h.clone() + scaled(self.attn.forward(self.ln_attn.forward(h), cache));
                h.clone() + scaled(self.ffn.forward(self.ln_ffn.forward(h)))
            }
            Gate::Compacted { scale, queries } => {
                let x = self.ln_attn.forward(h.clone());
                let h = match queries {
                    false => h + scale.clone() * self.attn.forward(x, cache),
                    true => sparse::add_attention_kept(h, &self.attn, x, scale.clone()),
                };
                let x = self.ln_ffn.forward(h.clone());
                sparse::add_ffn_kept(h, &self.ffn, x, scale.clone())
            }
            Gate::Skip => {
                if let Some(cache) = cache {
                    self.attn.cache_kv(self.ln_attn.forward(h.clone()), cache);
                }
                h
            }
            Gate::Hard {
                keep,
                scale,
                queries,
            } => {
                debug_assert!(cache.is_none(), "sparse rows run whole sequences");
                let x = self.ln_attn.forward(h.clone());
                let h = match queries {
                    None => h + scale.clone() * self.attn.forward(x, None),
                    Some(positions) => sparse::add_attention_rows(
                        h,
                        &self.attn,
                        x,
                        keep.clone(),
                        positions,
                        scale.clone(),
                    ),
                };
                let x = self.ln_ffn.forward(h.clone());
                sparse::add_ffn_rows(h, &self.ffn, x, keep.clone(), scale.clone())
            }
        }
    }
}
