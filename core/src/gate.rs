//! What multiplies a block's residual updates, per token: the one thing that differs between
//! the ways a routed block runs (§2.3: g = 1 − p_l in the paper's training).

use burn::tensor::{Int, Tensor};

use crate::sparse;

// One gate per routed block and forward pass: its size does not matter, boxing would only obscure.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone)]
pub enum Gate {
    /// g = 1: the stem, the dense baseline, and early exit in training.
    Open,
    /// g ∈ [0, 1] of shape [B, T, 1]: TSA's gates, MoD's masked router weight, and hard routing
    /// by masking (every token computes, the halted ones' updates are multiplied by 0).
    Soft(Tensor<3>),
    /// Sparse execution (§3.6): only the rows `keep` (flat indices into B·T) run the FFN, via
    /// gather/scatter; attention runs for every token (their K/V are needed) but its update is
    /// multiplied by `scale` [B, T, 1], which is zero on the halted tokens.
    /// With `queries` (extended sparse mode), halted tokens also skip their attention query rows
    /// and Q/output projections: `queries[b]` lists the kept positions of sequence b.
    /// Built by `sparse::hard_gate`.
    Hard {
        keep: Tensor<1, Int>,
        scale: Tensor<3>,
        queries: Option<Vec<Vec<i64>>>,
    },
    /// Sparse execution on a cubecl device (wgpu, CUDA): the FFN runs only for the tokens with
    /// `scale` [B, T, 1] > 0, compacted and dispatched on the device with no host read
    /// (`tsa-shaders`); attention runs for every token, its update multiplied by `scale` (zero
    /// on the halted tokens) — or, with `queries` (extended mode), only the kept tokens' query
    /// rows run, on the device too. Built by `TsaModel::gate` where `sparse::on_device`.
    Compacted { scale: Tensor<3>, queries: bool },
    /// The token skips the block (sparse generation, one token at a time): it only appends its
    /// keys and values to the block's cache, for the tokens after it.
    Skip,
}

impl Gate {
    /// The gate whose values are `g` [B, T]. With `skip_halted` (training only), the tokens where
    /// g is exactly 0 — a hard gate's halted tokens, MoD's unchosen ones — skip the FFN for real
    /// (gathered rows, as in sparse inference: a host read of the mask per block, so a CPU
    /// option). The forward values are unchanged, since their update was multiplied by 0; what
    /// changes is the gradient: g no longer learns through the FFN update those tokens skipped
    /// (for MoD that term was 0 already; for TSA's straight-through gates it is dropped, and
    /// their routers learn from the attention update and the compute target alone there).
    pub fn from_values(g: Tensor<2>, skip_halted: bool) -> Gate {
        match skip_halted {
            true => sparse::hard_gate(g.clone().greater_elem(0.0), g, false),
            false => Gate::Soft(g.unsqueeze_dim(2)),
        }
    }
}
