//! Weight initialisation, in one place (paper, Appendix A "Weight Initialisation").
//!
//! Embeddings: N(0, 0.02²). Residual projections (attention output, the FFN's second layer):
//! N(0, (0.02/√(2L))²), following GPT-2/3, with zero biases. LayerNorm at (1, 0). The linear
//! layers Appendix A does not name follow [`InitScheme`]: PyTorch's default uniform(±1/√fan_in)
//! for weights and biases, or N(0, 0.02²) with zero biases.

use burn::module::{Initializer, Param};
use burn::nn::Linear;
use burn::tensor::{Device, Tensor};

use crate::config::InitScheme;

/// Standard deviation of embeddings (and of unnamed weights under [`InitScheme::Normal`]).
pub const STD: f64 = 0.02;

/// Standard deviation of residual projections in a model with `n_layers` blocks.
pub fn residual_std(n_layers: usize) -> f64 {
    STD / (2.0 * n_layers as f64).sqrt()
}

/// A normal-initialised weight matrix.
pub fn normal<const D: usize>(shape: [usize; D], std: f64, device: &Device) -> Param<Tensor<D>> {
    Initializer::Normal { mean: 0.0, std }.init(shape, device)
}

/// A residual projection `y = xW (+ b)`: W ~ N(0, residual_std²), b = 0 (None: no bias).
pub fn residual(d_in: usize, d_out: usize, n_layers: usize, bias: bool, device: &Device) -> Linear {
    Linear {
        weight: normal([d_in, d_out], residual_std(n_layers), device),
        bias: bias.then(|| Initializer::Zeros.init([d_out], device)),
    }
}

/// A linear layer Appendix A does not name, initialised by `scheme`; `bias` overrides the bias
/// value (the router's final −1), `None` in `has_bias = false` means no bias at all.
pub fn unnamed(
    d_in: usize,
    d_out: usize,
    scheme: InitScheme,
    bias: Bias,
    device: &Device,
) -> Linear {
    let bound = 1.0 / (d_in as f64).sqrt();
    let uniform = Initializer::Uniform {
        min: -bound,
        max: bound,
    };
    let weight = match scheme {
        InitScheme::Torch => uniform.init([d_in, d_out], device),
        InitScheme::Normal => normal([d_in, d_out], STD, device),
    };
    let bias = match (bias, scheme) {
        (Bias::None, _) => None,
        (Bias::Value(value), _) => Some(Initializer::Constant { value }.init([d_out], device)),
        (Bias::Default, InitScheme::Torch) => Some(uniform.init([d_out], device)),
        (Bias::Default, InitScheme::Normal) => Some(Initializer::Zeros.init([d_out], device)),
    };
    Linear { weight, bias }
}

/// The bias of an unnamed linear layer.
#[derive(Debug, Clone, Copy)]
pub enum Bias {
    None,
    /// The scheme's own bias initialisation.
    Default,
    /// A fixed value, whatever the scheme.
    Value(f64),
}
