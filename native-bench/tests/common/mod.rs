//! What the command-line tests share: running the binary, reading what it wrote.
#![allow(dead_code)] // each test binary uses its own part

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub fn bench<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_native-bench"))
        .args(args)
        .output()
        .expect("native-bench runs")
}

pub fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Runs native-bench with `args`, expecting a refusal whose message says `why`.
pub fn refused<S: AsRef<std::ffi::OsStr>>(args: &[S], why: &str) {
    let o = bench(args);
    assert!(
        !o.status.success() && text(&o).contains(why),
        "expected a refusal saying {why:?}: {}",
        text(&o)
    );
}

/// (step, val_loss) of each line of a training log.
pub fn curve(log: &Path) -> Vec<(u64, f64)> {
    std::fs::read_to_string(log)
        .expect("log written")
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("JSON line");
            (
                v["step"].as_u64().expect("step"),
                v["val_loss"].as_f64().expect("val_loss"),
            )
        })
        .collect()
}

/// A small corpus written in `dir`; its path.
pub fn corpus_in(dir: &Path) -> String {
    let path = dir.join("corpus.txt");
    let text = "Now is the winter of our discontent\nMade glorious summer by this sun of York;\n";
    std::fs::write(&path, text.repeat(30)).expect("corpus");
    path.to_string_lossy().into_owned()
}

/// A fresh directory of this test process for `test`.
pub fn scratch(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tsa-bench-{}-{test}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir); // a failed run's leftovers under a reused pid
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}
