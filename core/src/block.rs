//! A pre-norm transformer block whose two residual updates are scaled by a per-token gate:
//! `h ← h + g ⊙ Δattn(h)`, `h ← h + g ⊙ Δffn(h)` (paper §2.3, with g = 1 − p_l).

use burn::module::Module;
use burn::nn::{Dropout, DropoutConfig, LayerNorm, LayerNormConfig, Linear};
use burn::tensor::activation::gelu;
use burn::tensor::{Device, Tensor};

use crate::attention::CausalSelfAttention;
use crate::config::TsaConfig;
use crate::init::{self, Bias};
use crate::sparse;

/// GELU feed-forward network d → d_ff → d, with biases; dropout (training only) after the GELU
/// and after the second layer, as in the paper authors' code.
#[derive(Module, Debug)]
pub struct Ffn {
    pub fc: Linear,
    /// Second layer: a residual projection, so it gets the scaled init.
    pub proj: Linear,
    pub dropout: Dropout,
}

impl Ffn {
    pub fn init(c: &TsaConfig, device: &Device) -> Self {
        Self {
            fc: init::unnamed(c.d_model, c.d_ff, c.init, Bias::Default, device),
            proj: init::residual(c.d_ff, c.d_model, c.n_layers, true, device),
            dropout: DropoutConfig::new(c.dropout).init(),
        }
    }

    /// Works on any leading shape: [B, T, d] in the dense path, [k, d] rows in the sparse one.
    pub fn forward<const D: usize>(&self, x: Tensor<D>) -> Tensor<D> {
        let hidden = self.dropout.forward(gelu(self.fc.forward(x)));
        self.dropout.forward(self.proj.forward(hidden))
    }
}

/// What multiplies a block's residual updates, per token.
#[derive(Debug, Clone)]
pub enum Gate {
    /// g = 1: the stem, the dense baseline, and early exit in training.
    Open,
    /// g ∈ [0, 1] of shape [B, T, 1]: TSA's soft gate 1 − p, MoD's masked router weight.
    Soft(Tensor<3>),
    /// Sparse execution (§3.6): only the rows `keep` (flat indices into B·T) run the FFN, via
    /// gather/scatter; attention runs for every token (their K/V are needed) but its update is
    /// multiplied by `scale` [B, T, 1], which is zero on the halted tokens.
    /// With `queries` (extended sparse mode), halted tokens also skip their attention query rows
    /// and Q/output projections: `queries[b]` lists the kept positions of sequence b.
    Hard {
        keep: Tensor<1, burn::tensor::Int>,
        scale: Tensor<3>,
        queries: Option<Vec<Vec<i64>>>,
    },
}

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

    /// `h`: [B, T, d] → [B, T, d].
    pub fn forward(&self, h: Tensor<3>, gate: &Gate) -> Tensor<3> {
        let attn = |h: Tensor<3>| self.attn.forward(self.ln_attn.forward(h));
        match gate {
            Gate::Open => {
                let h = h.clone() + attn(h);
                h.clone() + self.ffn.forward(self.ln_ffn.forward(h))
            }
            Gate::Soft(g) => {
                let h = h.clone() + g.clone() * attn(h);
                h.clone() + g.clone() * self.ffn.forward(self.ln_ffn.forward(h))
            }
            Gate::Hard {
                keep,
                scale,
                queries,
            } => {
                let h = match queries {
                    None => h.clone() + scale.clone() * attn(h),
                    // Nothing kept: no query row runs at all.
                    Some(_) if keep.dims()[0] == 0 => h,
                    Some(positions) => {
                        let x = self.ln_attn.forward(h.clone());
                        let rows = self.attn.forward_rows(x, keep.clone(), positions);
                        sparse::add_rows(h, rows, keep.clone(), scale.clone())
                    }
                };
                let x = self.ln_ffn.forward(h.clone());
                sparse::add_ffn_rows(h, &self.ffn, x, keep.clone(), scale.clone())
            }
        }
    }
}
