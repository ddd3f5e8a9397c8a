//! Checkpoints: model weights (Burn's burnpack record) + config + vocabulary + step, as one byte
//! string that native code and the browser both read and write.
//!
//! Layout (`framed.rs`'s envelope): `TSACKPT1` | header length (u32 LE) | header JSON | record
//! length (u64 LE) | record | CRC-32 of everything before it (u32 LE). The checksum catches
//! truncation and bit flips before Burn sees the record; Burn's own validation then catches a record that does not fit
//! the config (missing, extra or mis-shaped tensors).

use std::collections::HashMap;

use burn::module::{Module, ModuleMapper, ModuleVisitor, Param, ParamId};
use burn::store::ModuleRecord;
use burn::tensor::{Bytes, Device, Tensor, TensorData};
use serde::{Deserialize, Serialize};

use crate::config::TsaConfig;
use crate::data::CharTokenizer;
use crate::error::{Result, TsaError};
use crate::framed;
use crate::model::TsaModel;
use crate::read;

const MAGIC: &[u8; 8] = b"TSACKPT1";

/// Everything in a checkpoint besides the weights.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckpointMeta {
    pub config: TsaConfig,
    /// The character vocabulary (None for the synthetic tasks, whose tokens are ids).
    pub vocab: Option<CharTokenizer>,
    /// Optimiser steps the weights have had.
    pub step: usize,
}

impl CheckpointMeta {
    /// Parses the metadata JSON (a checkpoint's header, a safetensors export's `tsa` entry),
    /// filling in the config fields that files written before them lack.
    pub fn from_json(json: &[u8]) -> serde_json::Result<Self> {
        let mut value: serde_json::Value = serde_json::from_slice(json)?;
        if let Some(c) = value.get_mut("config") {
            TsaConfig::upgrade_json(c);
        }
        serde_json::from_value(value)
    }
}

fn bad(msg: impl Into<String>) -> TsaError {
    TsaError::Checkpoint(msg.into())
}

/// Serialises `model` (on any device) with `meta`. Weights are read back asynchronously and
/// packed on the CPU, so this works in the browser too.
pub async fn to_bytes(model: &TsaModel, meta: &CheckpointMeta) -> Result<Vec<u8>> {
    let host = host_copy(model).await?;
    let record = host
        .into_record()
        .into_bytes()
        .map_err(|e| bad(e.to_string()))?;
    let header = serde_json::to_vec(meta).map_err(|e| bad(e.to_string()))?;
    Ok(framed::write(MAGIC, &header, &[&record]))
}

/// Reads a checkpoint's metadata only, checking the whole file's integrity.
pub fn read_meta(bytes: &[u8]) -> Result<CheckpointMeta> {
    split(bytes).map(|(meta, _)| meta)
}

/// Rebuilds the model on `device`. A corrupt, truncated or mismatched file is an error and
/// touches nothing else.
pub fn from_bytes(bytes: &[u8], device: &Device) -> Result<(TsaModel, CheckpointMeta)> {
    let (meta, record) = split(bytes)?;
    let record = ModuleRecord::from_bytes(Bytes::from_bytes_vec(record.to_vec()))
        .map_err(|e| bad(format!("weights unreadable: {e}")))?;
    let model = meta
        .config
        .init(device)?
        .try_load_record(record)
        .map_err(|e| bad(format!("weights do not fit the config: {e}")))?;
    Ok((model, meta))
}

fn split(bytes: &[u8]) -> Result<(CheckpointMeta, &[u8])> {
    // A training state holds a whole checkpoint: every reader of checkpoints reads it too (one
    // level: a state inside a state fails the magic check below).
    match crate::train_state::is_state(bytes) {
        true => split_checkpoint(crate::train_state::checkpoint_bytes(bytes)?),
        false => split_checkpoint(bytes),
    }
}

fn split_checkpoint(bytes: &[u8]) -> Result<(CheckpointMeta, &[u8])> {
    let [header, record] =
        framed::read(bytes, MAGIC, "tsa checkpoint", ["header", "record"]).map_err(bad)?;
    let meta =
        CheckpointMeta::from_json(header).map_err(|e| bad(format!("header unreadable: {e}")))?;
    meta.config.validate()?;
    if let Some(vocab) = &meta.vocab
        && vocab.vocab_size() != meta.config.vocab_size
    {
        return Err(bad(format!(
            "vocabulary has {} characters but the model {}",
            vocab.vocab_size(),
            meta.config.vocab_size
        )));
    }
    Ok((meta, record))
}

/// The same module with every parameter copied to the CPU (flex) through asynchronous reads.
pub(crate) async fn host_copy(model: &TsaModel) -> Result<TsaModel> {
    struct Gather(Vec<(ParamId, Tensor<1>, Vec<usize>)>);
    impl ModuleVisitor for Gather {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            let t = param.val();
            let shape = t.dims().to_vec();
            let n = shape.iter().product::<usize>();
            self.0.push((param.id, t.reshape([n]), shape));
        }
    }
    struct Place {
        host: Device,
        data: HashMap<ParamId, (Vec<f32>, Vec<usize>)>,
    }
    impl ModuleMapper for Place {
        fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
            let id = param.id;
            match self.data.remove(&id) {
                Some((values, shape)) => Param::initialized(
                    id,
                    Tensor::from_data(TensorData::new(values, shape), &self.host),
                ),
                None => param,
            }
        }
    }

    let model = model.valid();
    let mut gather = Gather(Vec::new());
    model.visit(&mut gather);
    let mut data = HashMap::new();
    for (id, t, shape) in gather.0 {
        data.insert(id, (read::floats(t).await?, shape));
    }
    Ok(model.map(&mut Place {
        host: Device::flex(),
        data,
    }))
}
