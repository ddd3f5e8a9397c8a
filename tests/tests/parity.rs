//! Parity with the twin in tests/parity/twin.py (the same architecture, written independently in
//! NumPy): the same weights, exported to safetensors, give the same logits, halting probabilities
//! and loss to 1e-4, for the dense baseline and for TSA with its soft and its straight-through gate.
//! Needs python3 with NumPy (scripts/test installs it).

use std::path::{Path, PathBuf};
use std::process::Command;

use burn::tensor::{Device, Int, Tensor, TensorData};
use tsa_core::checkpoint::CheckpointMeta;
use tsa_core::read::{block_on, floats};
use tsa_core::{Execution, Routing, TsaConfig, TsaGate, loss};

fn export(dir: &Path, name: &str, routing: Routing) -> (PathBuf, PathBuf) {
    let device = Device::flex();
    device.seed(17);
    let config = TsaConfig::new(12)
        .with_d_model(32)
        .with_n_layers(4)
        .with_n_heads(4)
        .with_d_ff(64)
        .with_context(16)
        .with_dropout(0.1)
        .with_routing(routing);
    let model = config.init(&device).expect("valid config");
    let rows: Vec<Vec<i32>> = (0..3)
        .map(|r| (0..16).map(|i| (i * 5 + r * 7 + 1) % 12).collect())
        .collect();
    let targets: Vec<Vec<i32>> = rows
        .iter()
        .map(|r| r.iter().map(|x| (x * 3 + 1) % 12).collect())
        .collect();
    let ints = |v: &Vec<Vec<i32>>| {
        Tensor::<2, Int>::from_data(TensorData::new(v.concat(), [v.len(), v[0].len()]), &device)
    };
    let out = model.forward(ints(&rows), Execution::Soft);
    let ce = loss::cross_entropy(out.logits.clone(), ints(&targets), None);
    let read = |t: Tensor<1>| block_on(floats(t)).expect("read");
    let expected = serde_json::json!({
        "tokens": rows,
        "targets": targets,
        "logits": read(out.logits.reshape([-1])),
        "halting": out.halting.iter().map(|p| read(p.clone().reshape([-1]))).collect::<Vec<_>>(),
        "loss": read(ce)[0],
    });
    let meta = CheckpointMeta {
        config,
        vocab: None,
        step: 0,
    };
    let st = dir.join(format!("{name}.safetensors"));
    let js = dir.join(format!("{name}.json"));
    std::fs::write(
        &st,
        tsa_core::export::to_safetensors(&model, &meta).expect("export"),
    )
    .unwrap();
    std::fs::write(&js, expected.to_string()).unwrap();
    (st, js)
}

#[test]
fn the_numpy_twin_computes_the_same_logits_halting_and_loss() {
    let dir = std::env::temp_dir().join(format!("tsa-parity-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // Cargo sets the manifest dir at run time too; preferring it keeps a test binary built in
    // another checkout that shares the target dir (fresh by mtime) pointing at this one's twin.
    let manifest = std::env::var_os("CARGO_MANIFEST_DIR").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf(),
        Into::into,
    );
    let twin = manifest.join("parity/twin.py");
    let cases = [
        ("dense", Routing::Dense),
        ("tsa-soft", Routing::tsa(0.001)),
        (
            "tsa-st",
            Routing::Tsa {
                lambda: 0.0,
                gate: TsaGate::StraightThrough,
                target: Some(0.5),
                commit: 0.0,
            },
        ),
    ];
    for (name, routing) in cases {
        let (st, js) = export(&dir, name, routing);
        let out = Command::new("python3")
            .arg(&twin)
            .arg("check")
            .arg(&st)
            .arg(&js)
            .output()
            .expect("python3 must be on PATH (scripts/test installs NumPy for it)");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        println!("{name}: {text}");
        assert!(
            out.status.success(),
            "{name}: the twin disagrees or failed:\n{text}"
        );
    }
    std::fs::remove_dir_all(&dir).ok();
}
