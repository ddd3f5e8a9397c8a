//! Weight initialisation, in one place (paper, Appendix A "Weight Initialisation").
//!
//! Embeddings and ordinary weights: N(0, 0.02²). Residual projections (attention output, the FFN's
//! second layer): N(0, (0.02/√(2L))²), following GPT-2/3. Biases start at zero, LayerNorm at (1, 0).

use burn::module::{Initializer, Param};
use burn::nn::Linear;
use burn::tensor::{Device, Tensor};

/// Standard deviation of embeddings and ordinary weights.
pub const STD: f64 = 0.02;

/// Standard deviation of residual projections in a model with `n_layers` blocks.
pub fn residual_std(n_layers: usize) -> f64 {
    STD / (2.0 * n_layers as f64).sqrt()
}

/// A normal-initialised weight matrix.
pub fn normal<const D: usize>(shape: [usize; D], std: f64, device: &Device) -> Param<Tensor<D>> {
    Initializer::Normal { mean: 0.0, std }.init(shape, device)
}

/// A linear layer `y = xW (+ b)` with W ~ N(0, std²) and b = `bias_value` (None: no bias).
pub fn linear(d_in: usize, d_out: usize, std: f64, bias: Option<f64>, device: &Device) -> Linear {
    Linear {
        weight: normal([d_in, d_out], std, device),
        bias: bias.map(|value| Initializer::Constant { value }.init([d_out], device)),
    }
}
