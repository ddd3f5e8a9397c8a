//! A batch of token windows on a device.

use burn::tensor::{Device, Int, Tensor, TensorData};

#[derive(Debug, Clone)]
pub struct Batch {
    /// [B, T] input tokens.
    pub inputs: Tensor<2, Int>,
    /// [B, T] next tokens.
    pub targets: Tensor<2, Int>,
    /// [B, T] 1 where the loss counts (None: everywhere).
    pub mask: Option<Tensor<2>>,
}

impl Batch {
    /// From flattened rows of length `t`.
    pub fn new(
        inputs: Vec<i32>,
        targets: Vec<i32>,
        mask: Option<Vec<f32>>,
        t: usize,
        device: &Device,
    ) -> Self {
        let b = inputs.len() / t;
        let int = |v: Vec<i32>| Tensor::<2, Int>::from_data(TensorData::new(v, [b, t]), device);
        Self {
            inputs: int(inputs),
            targets: int(targets),
            mask: mask.map(|m| Tensor::<2>::from_data(TensorData::new(m, [b, t]), device)),
        }
    }
}
