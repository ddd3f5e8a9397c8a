//! Gradient parity with the PyTorch twin: writes a small model's weights (DIR/m.safetensors) and
//! its gradients for one batch (DIR/grads.json); `tests/parity/torch_grads.py DIR` recomputes them
//! in PyTorch (float64) and prints the largest relative difference.
//!
//!     cargo run --release -p tsa-core --example parity_grads -- DIR [tsa]
use burn::module::{ModuleVisitor, Param};
use burn::optim::GradientsParams;
use burn::tensor::{Device, Int, Tensor, TensorData};
use tsa_core::checkpoint::CheckpointMeta;
use tsa_core::read::{block_on, floats};
use tsa_core::{Execution, Routing, TsaConfig, loss};

fn main() {
    let dir = std::env::args().nth(1).expect("dir");
    let device = Device::flex().autodiff();
    device.seed(3);
    let routing = if std::env::args().nth(2).as_deref() == Some("tsa") {
        Routing::tsa(0.0)
    } else {
        Routing::Dense
    };
    let cfg = TsaConfig::new(12)
        .with_d_model(32)
        .with_n_layers(3)
        .with_n_heads(4)
        .with_d_ff(64)
        .with_context(16)
        .with_routing(routing);
    let model = cfg.init(&device).unwrap();
    let rows: Vec<i32> = (0..48).map(|i| (i * 5 + 1) % 12).collect();
    let tg: Vec<i32> = rows.iter().map(|x| (x * 3 + 1) % 12).collect();
    let x = Tensor::<2, Int>::from_data(TensorData::new(rows.clone(), [3, 16]), &device);
    let y = Tensor::<2, Int>::from_data(TensorData::new(tg.clone(), [3, 16]), &device);
    let out = model.forward(x, Execution::Soft);
    let l = loss::cross_entropy(out.logits, y, None);
    let grads = GradientsParams::from_grads(l.backward(), &model);
    struct V<'a> {
        path: Vec<String>,
        g: &'a GradientsParams,
        out: serde_json::Map<String, serde_json::Value>,
    }
    impl ModuleVisitor for V<'_> {
        fn enter_module(&mut self, name: &str, _: &str) {
            self.path.push(name.to_string());
        }
        fn exit_module(&mut self, _: &str, _: &str) {
            self.path.pop();
        }
        fn visit_float<const D: usize>(&mut self, p: &Param<Tensor<D>>) {
            if let Some(g) = self.g.get::<D>(p.id) {
                let dims = g.dims().to_vec();
                let v = block_on(floats(g)).unwrap();
                self.out.insert(
                    self.path.join("."),
                    serde_json::json!({"dims": dims, "g": v}),
                );
            }
        }
    }
    let mut v = V {
        path: vec![],
        g: &grads,
        out: Default::default(),
    };
    burn::module::Module::visit(&model, &mut v);
    let meta = CheckpointMeta {
        config: cfg,
        vocab: None,
        step: 0,
    };
    std::fs::write(
        format!("{dir}/m.safetensors"),
        tsa_core::export::to_safetensors(&model, &meta).unwrap(),
    )
    .unwrap();
    std::fs::write(
        format!("{dir}/grads.json"),
        serde_json::json!({"tokens": rows, "targets": tg, "grads": v.out}).to_string(),
    )
    .unwrap();
}
