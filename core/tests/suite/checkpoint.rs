use burn::module::{Module, ModuleVisitor, Param};
use burn::tensor::Tensor;
use tsa_core::checkpoint::{self, CheckpointMeta};
use tsa_core::data::CharTokenizer;
use tsa_core::read::block_on;
use tsa_core::{Execution, Routing, TsaError, TsaModel};

use crate::common::*;

pub fn all_params(model: &TsaModel) -> Vec<f32> {
    struct All(Vec<f32>);
    impl ModuleVisitor for All {
        fn visit_float<const D: usize>(&mut self, p: &Param<Tensor<D>>) {
            self.0.extend(floats(p.val()));
        }
    }
    let mut all = All(Vec::new());
    model.visit(&mut all);
    all.0
}

fn saved() -> (TsaModel, Vec<u8>) {
    let device = cpu();
    let tok = CharTokenizer::fit("abcdefghij").unwrap();
    let cfg = micro(tok.vocab_size(), Routing::tsa(0.01));
    let model = model(&cfg, 21, &device);
    let meta = CheckpointMeta {
        config: cfg,
        vocab: Some(tok),
        step: 42,
    };
    let bytes = block_on(checkpoint::to_bytes(&model, &meta)).unwrap();
    (model, bytes)
}

#[test]
fn round_trip_is_exact() {
    let (model, bytes) = saved();
    let (back, meta) = checkpoint::from_bytes(&bytes, &cpu()).unwrap();
    assert_eq!(meta.step, 42);
    assert_eq!(meta.vocab.unwrap().chars().len(), 10);
    assert_eq!(back.config, model.config);
    assert_eq!(all_params(&back), all_params(&model));
    let x = tokens(&[vec![1, 2, 3, 4, 5]], &cpu());
    let a = floats(model.forward(x.clone(), Execution::Soft).logits);
    let b = floats(back.forward(x, Execution::Soft).logits);
    assert_eq!(a, b);
    // Saving the loaded model gives the same bytes.
    let again = block_on(checkpoint::to_bytes(
        &back,
        &checkpoint::read_meta(&bytes).unwrap(),
    ))
    .unwrap();
    assert_eq!(again, bytes);
}

#[test]
fn corrupt_truncated_and_foreign_files_are_clear_errors() {
    let (_, bytes) = saved();
    let device = cpu();
    let msg = |b: &[u8]| match checkpoint::from_bytes(b, &device) {
        Err(TsaError::Checkpoint(m)) => m,
        Err(e) => panic!("expected a checkpoint error, got {e}"),
        Ok(_) => panic!("a bad file loaded"),
    };
    let mut flipped = bytes.clone();
    let mid = flipped.len() / 2;
    flipped[mid] ^= 0x40;
    assert!(msg(&flipped).contains("checksum"));
    assert!(msg(&bytes[..bytes.len() - 100]).contains("checksum"));
    assert!(msg(&bytes[..10]).contains("too short"));
    assert!(msg(b"PK\x03\x04 this is a zip file, not a checkpoint").contains("magic"));
    assert!(msg(&[]).contains("too short"));
}

#[test]
fn a_header_that_does_not_fit_the_weights_is_refused() {
    // Re-pack the same weights under a wider config, with a valid checksum: Burn's record
    // validation must catch the shape mismatch.
    let (model, _) = saved();
    let tok = CharTokenizer::fit("abcdefghij").unwrap();
    let wrong = CheckpointMeta {
        config: model.config.clone().with_d_ff(128),
        vocab: Some(tok.clone()),
        step: 1,
    };
    let bytes = block_on(checkpoint::to_bytes(&model, &wrong)).unwrap();
    let err = checkpoint::from_bytes(&bytes, &cpu()).expect_err("mismatched file must not load");
    assert!(err.to_string().contains("do not fit"), "{err}");
    // A vocabulary that disagrees with the config's vocab size.
    let other = CharTokenizer::fit("abc").unwrap();
    let wrong = CheckpointMeta {
        config: model.config.clone(),
        vocab: Some(other),
        step: 1,
    };
    let bytes = block_on(checkpoint::to_bytes(&model, &wrong)).unwrap();
    assert!(
        checkpoint::from_bytes(&bytes, &cpu())
            .err()
            .unwrap()
            .to_string()
            .contains("vocabulary")
    );
}

#[test]
fn safetensors_export_round_trips_bit_equal_in_pytorch_layout() {
    use tsa_core::export::{from_safetensors, to_safetensors};
    for routing in all_routings() {
        let tok = CharTokenizer::fit("abcdefghij").unwrap();
        let cfg = micro(tok.vocab_size(), routing);
        let model = model(&cfg, 5, &cpu());
        let meta = CheckpointMeta {
            config: cfg.clone(),
            vocab: Some(tok),
            step: 7,
        };
        let bytes = to_safetensors(&model, &meta).unwrap();
        // PyTorch's layout: Linear weights [out, in], LayerNorm γ/β as weight/bias.
        let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
        let qkv = st.tensor("blocks.1.attn.qkv.weight").unwrap();
        assert_eq!(qkv.shape(), &[3 * cfg.d_model, cfg.d_model]);
        assert!(st.tensor("ln_f.weight").is_ok() && st.tensor("ln_f.gamma").is_err());
        let (back, meta_back) = from_safetensors(&bytes, &cpu()).unwrap();
        assert_eq!(meta_back, meta);
        assert_eq!(all_params(&back), all_params(&model), "{routing:?}");
    }
}

#[test]
fn a_wrong_safetensors_file_is_a_clear_error() {
    use tsa_core::export::{from_safetensors, to_safetensors};
    let device = cpu();
    let err = |bytes: &[u8]| match from_safetensors(bytes, &device) {
        Err(TsaError::Checkpoint(msg)) => msg,
        Err(e) => panic!("wrong error kind: {e}"),
        Ok(_) => panic!("accepted a bad file"),
    };
    assert!(err(b"not safetensors at all").contains("not a safetensors file"));
    // A valid safetensors file without our metadata.
    let foreign = safetensors::serialize(
        vec![(
            "x",
            safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![1], &[0u8; 4])
                .unwrap(),
        )],
        None,
    )
    .unwrap();
    assert!(err(&foreign).contains("no `tsa` metadata"));
    // Our metadata, but a config that does not fit the weights.
    let cfg = micro(10, Routing::tsa(0.01));
    let m = model(&cfg, 1, &device);
    let meta = CheckpointMeta {
        config: cfg.clone(),
        vocab: None,
        step: 0,
    };
    let bytes = to_safetensors(&m, &meta).unwrap();
    let (_, header) = safetensors::SafeTensors::read_metadata(&bytes).unwrap();
    let json = header.metadata().as_ref().unwrap()["tsa"].replace("\"d_ff\":64", "\"d_ff\":32");
    let tensors = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let views: Vec<(String, safetensors::tensor::TensorView)> = tensors.tensors();
    let mut md = std::collections::HashMap::new();
    md.insert("tsa".to_string(), json);
    let mismatched = safetensors::serialize(views, Some(md)).unwrap();
    assert!(err(&mismatched).contains("do not fit"));
}
