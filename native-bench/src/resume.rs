//! Stopping and resuming: what `train` and `reproduce` keep in a training state besides the
//! trainer, where they write it, and Ctrl-C. The state itself is tsa-core's `train_state`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{Context, Result};
use burn::tensor::Device;
use serde::{Deserialize, Serialize};
use tsa_core::Trainer;
use tsa_core::data::CharTokenizer;
use tsa_core::data::tasks::Task;
use tsa_core::read::block_on;
use tsa_core::train_state;

use crate::train::EvalPoint;

/// How a run begins.
pub enum Start {
    Fresh,
    /// From these weights (`--init-from`), at step 0.
    Weights(Box<tsa_core::TsaModel>),
    /// Where a stopped run stopped (`--resume`).
    Resume {
        trainer: Box<Trainer>,
        so_far: Progress,
    },
}

/// What a training state keeps besides the trainer (core's `extra`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Progress {
    pub label: String,
    pub eval_every: usize,
    pub eval_batches: usize,
    pub task: Option<Task>,
    /// The corpus file (absolute) and its CRC-32: a resumed run must read the same text.
    pub corpus: Option<PathBuf>,
    pub corpus_crc: Option<u32>,
    pub curve: Vec<EvalPoint>,
    /// Training seconds so far.
    pub seconds: f64,
    /// `train`'s checkpoint and log files (absolute), which a resumed run writes again.
    pub out: Option<PathBuf>,
    pub log: Option<PathBuf>,
}

/// What a run trains on, as its training state records it: a corpus (its vocabulary, file and
/// checksum) or a synthetic task.
#[derive(Debug, Clone, Default)]
pub struct Source {
    pub vocab: Option<CharTokenizer>,
    pub task: Option<Task>,
    /// The corpus file, absolute, and its CRC-32.
    pub corpus: Option<PathBuf>,
    pub corpus_crc: Option<u32>,
}

/// Where and when a run writes its training state, and what the state records of the run.
pub struct StateOut {
    pub path: PathBuf,
    pub stop_at: Option<usize>,
    pub source: Source,
    pub out: Option<PathBuf>,
    pub log: Option<PathBuf>,
}

impl StateOut {
    /// Writes the state of `trainer` with the run's `curve` so far.
    pub fn write(
        &self,
        trainer: &Trainer,
        label: &str,
        (eval_every, eval_batches): (usize, usize),
        curve: &[EvalPoint],
        seconds: f64,
    ) -> Result<()> {
        let progress = Progress {
            label: label.to_string(),
            eval_every,
            eval_batches,
            task: self.source.task,
            corpus: self.source.corpus.clone(),
            corpus_crc: self.source.corpus_crc,
            curve: curve.to_vec(),
            seconds,
            out: self.out.clone(),
            log: self.log.clone(),
        };
        let bytes = block_on(train_state::to_bytes(
            trainer,
            self.source.vocab.clone(),
            serde_json::to_value(&progress)?,
        ))?;
        write_atomically(&self.path, &bytes)
    }
}

/// A stopped run's trainer and progress, from its training state at `path`.
pub fn read_state(path: &Path, device: &Device) -> Result<(train_state::Resumed, Progress)> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut r =
        train_state::from_bytes(&bytes, device).with_context(|| format!("{}", path.display()))?;
    let so_far: Progress =
        serde_json::from_value(std::mem::take(&mut r.extra)).with_context(|| {
            format!(
                "{}: not a training state written by `native-bench train`",
                path.display()
            )
        })?;
    Ok((r, so_far))
}

/// Set by Ctrl-C ([`stop_on_ctrl_c`]).
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// Whether Ctrl-C was pressed: a run stops after its current step, with its state written.
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

/// A run that Ctrl-C, SIGTERM or SIGHUP stopped after writing what it had: not a failure, but not
/// a finished run either, so `main` prints the message and exits 130 (as a shell reports a process
/// SIGINT ended), and `train … && next` does not go on.
#[derive(Debug)]
pub struct Interrupted(pub String);

impl std::fmt::Display for Interrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Interrupted {}

/// Ctrl-C (SIGINT), SIGTERM or SIGHUP asks the running training to stop ([`interrupted`]); a
/// second one quits at once.
pub fn stop_on_ctrl_c() {
    let handler = ctrlc::set_handler(|| {
        if INTERRUPTED.swap(true, Ordering::SeqCst) {
            std::process::exit(130);
        }
        // Not `eprintln!`: after SIGHUP the terminal may be gone, and a failed write panics.
        let _ = writeln!(
            std::io::stderr(),
            "\ninterrupted: stopping after this step and writing the training state (Ctrl-C again quits at once)"
        );
    });
    if let Err(e) = handler {
        eprintln!("warning: Ctrl-C will not save the training state ({e})");
    }
}

/// Writes `bytes` to `path` through a temporary file and a rename, so that a crash while
/// writing leaves the previous file whole.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".partial");
    let tmp = PathBuf::from(tmp);
    std::fs::write(&tmp, bytes).with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("cannot write {}", path.display()))
}

/// Removes `path` if it is there (a state that has served its purpose).
pub fn remove_if_there(path: &Path) -> Result<()> {
    match path.exists() {
        true => {
            std::fs::remove_file(path).with_context(|| format!("cannot remove {}", path.display()))
        }
        false => Ok(()),
    }
}

/// `path` made absolute, so that a run resumed from another directory finds its files.
pub fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}
