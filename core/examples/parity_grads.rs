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
    let quick = std::env::args().any(|a| a == "quick");
    let (nv, d, l, h, ff, t, b) = if quick {
        (65, 128, 6, 4, 512, 64, 16)
    } else {
        (12, 32, 3, 4, 64, 16, 3)
    };
    let cfg = TsaConfig::new(nv)
        .with_d_model(d)
        .with_n_layers(l)
        .with_n_heads(h)
        .with_d_ff(ff)
        .with_context(t)
        .with_routing(routing);
    let model = cfg.init(&device).unwrap();
    let rows: Vec<i32> = (0..b * t).map(|i| (i as i32 * 5 + 1) % nv as i32).collect();
    let tg: Vec<i32> = rows.iter().map(|x| (x * 3 + 1) % nv as i32).collect();
    let x = Tensor::<2, Int>::from_data(TensorData::new(rows.clone(), [b, t]), &device);
    let y = Tensor::<2, Int>::from_data(TensorData::new(tg.clone(), [b, t]), &device);
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
    // One optimiser step of the quick recipe (clipping, AdamW groups, lr at step 0) on the same
    // batch: DIR/m1.safetensors holds the weights after it.
    let train = tsa_core::Recipe::quick_lm(12, cfg.routing).train;
    let mut trainer = tsa_core::Trainer::from_model(model.clone(), train, 0);
    let batch = tsa_core::data::Batch::new(rows.clone(), tg.clone(), None, t, &device);
    block_on(trainer.step(&batch)).unwrap();
    let meta1 = CheckpointMeta {
        config: cfg.clone(),
        vocab: None,
        step: 1,
    };
    std::fs::write(
        format!("{dir}/m1.safetensors"),
        tsa_core::export::to_safetensors(&trainer.model, &meta1).unwrap(),
    )
    .unwrap();
    // Then 100 more steps on fixed pseudo-random batches: the loss trajectory (DIR/steps.json).
    let mut state = 12345u64;
    let mut next = || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((state >> 33) % nv as u64) as i32
    };
    let mut batches = Vec::new();
    let mut losses = Vec::new();
    for _ in 0..100 {
        let xs: Vec<i32> = (0..b * t).map(|_| next()).collect();
        let ys: Vec<i32> = xs.iter().map(|x| (x * 7 + 3) % nv as i32).collect();
        let b = tsa_core::data::Batch::new(xs.clone(), ys.clone(), None, t, &device);
        losses.push(block_on(trainer.step(&b)).unwrap().task_loss);
        batches.push(serde_json::json!([xs, ys]));
    }
    std::fs::write(
        format!("{dir}/steps.json"),
        serde_json::json!({"batches": batches, "losses": losses}).to_string(),
    )
    .unwrap();
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
