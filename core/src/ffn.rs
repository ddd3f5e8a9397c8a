//! The block's feed-forward network (§2.1's Δffn).

use burn::module::Module;
use burn::nn::{Dropout, DropoutConfig, Linear};
use burn::tensor::{Device, Tensor};

use crate::config::TsaConfig;
use crate::gelu::gelu;
use crate::init::{self, Bias};

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
