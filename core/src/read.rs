//! Reading tensors back to the host without a synchronous read (which panics in the browser).
//! Native code blocks on these futures with [`block_on`].

use burn::tensor::Tensor;

use crate::error::{Result, TsaError};

/// All values of a float tensor, read asynchronously.
pub async fn floats<const D: usize>(t: Tensor<D>) -> Result<Vec<f32>> {
    let data = t
        .into_data_async()
        .await
        .map_err(|e| TsaError::Read(format!("{e:?}")))?;
    data.convert::<f32>()
        .try_into_vec::<f32>()
        .map_err(|e| TsaError::Read(format!("{e:?}")))
}

/// Runs a future to completion on the current thread (native only; the browser awaits).
#[cfg(not(target_family = "wasm"))]
pub fn block_on<F: std::future::Future>(f: F) -> F::Output {
    pollster::block_on(f)
}
