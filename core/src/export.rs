//! Safetensors export and import (native only), in PyTorch's layout so that a trained model
//! opens in PyTorch or Hugging Face tooling and comes back: Linear weights as [out, in],
//! LayerNorm's γ/β as `weight`/`bias` (burn-store's PyTorch adapters do both). Tensor names are
//! the module paths: `tok_emb.weight`, `pos_emb`, `blocks.{i}.attn.qkv.weight` (Q | K | V rows),
//! `blocks.{i}.ffn.fc.{weight,bias}`, `routers.{l}.out.{weight,bias}`, `ln_f.{weight,bias}`, ….
//! The checkpoint's metadata (config, vocabulary, step) travels as JSON in the file's metadata
//! under `tsa`, so an import rebuilds the same model.

use burn::store::{BurnToPyTorchAdapter, ModuleSnapshot, PyTorchToBurnAdapter, SafetensorsStore};
use burn::tensor::Device;

use crate::checkpoint::{self, CheckpointMeta};
use crate::error::{Result, TsaError};
use crate::model::TsaModel;

/// The metadata key holding the checkpoint's JSON.
pub const META_KEY: &str = "tsa";

fn bad(msg: impl Into<String>) -> TsaError {
    TsaError::Checkpoint(msg.into())
}

/// `model` (on any device) as a safetensors file in PyTorch's layout, `meta` in its metadata.
pub fn to_safetensors(model: &TsaModel, meta: &CheckpointMeta) -> Result<Vec<u8>> {
    let host = crate::read::block_on(checkpoint::host_copy(model))?;
    let json = serde_json::to_string(meta).map_err(|e| bad(e.to_string()))?;
    let mut store = SafetensorsStore::from_bytes(None)
        .with_to_adapter(BurnToPyTorchAdapter)
        .metadata(META_KEY, json);
    host.save_into(&mut store)
        .map_err(|e| bad(format!("safetensors export failed: {e}")))?;
    store
        .get_bytes()
        .map_err(|e| bad(format!("safetensors export failed: {e}")))
}

/// Rebuilds the model written by [`to_safetensors`] (or by the PyTorch twin) on `device`. A file
/// that is not safetensors, lacks the `tsa` metadata, or whose tensors do not fit the config
/// (missing, extra or mis-shaped) is an error naming the problem.
pub fn from_safetensors(bytes: &[u8], device: &Device) -> Result<(TsaModel, CheckpointMeta)> {
    let (_, header) = safetensors::SafeTensors::read_metadata(bytes)
        .map_err(|e| bad(format!("not a safetensors file: {e}")))?;
    let json = header
        .metadata()
        .as_ref()
        .and_then(|m| m.get(META_KEY))
        .ok_or_else(|| bad(format!("no `{META_KEY}` metadata: not a TSA model export")))?;
    let meta = CheckpointMeta::from_json(json.as_bytes())
        .map_err(|e| bad(format!("`{META_KEY}` metadata: {e}")))?;
    let mut model = meta.config.init(device)?;
    let mut store = SafetensorsStore::from_bytes(Some(bytes.to_vec()))
        .with_from_adapter(PyTorchToBurnAdapter)
        .validate(true);
    let applied = model
        .load_from(&mut store)
        .map_err(|e| bad(format!("weights do not fit the config: {e}")))?;
    if !applied.missing.is_empty() || !applied.unused.is_empty() || !applied.errors.is_empty() {
        let missing: Vec<&str> = applied.missing.iter().map(|(p, _)| p.as_str()).collect();
        return Err(bad(format!(
            "weights do not fit the config: missing {missing:?}, unexpected {:?}, errors {:?}",
            applied.unused, applied.errors
        )));
    }
    Ok((model, meta))
}
