//! Command-line pieces more than one subcommand takes: the model's shape flags, a checkpoint,
//! the corpus, bounded flag values, and the check that outputs destroy nothing.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use burn::tensor::Device;
use clap::Args;
use tsa_core::checkpoint::{self, CheckpointMeta};
use tsa_core::data::{CharTokenizer, Corpus};
use tsa_core::{TsaConfig, TsaModel};

/// The transformer's shape: each flag given replaces the recipe's (the paper's LM shape where
/// there is no recipe).
#[derive(Args, Debug, Clone, PartialEq, Default)]
pub struct ShapeArgs {
    #[arg(long)]
    pub d_model: Option<usize>,
    #[arg(long)]
    pub layers: Option<usize>,
    #[arg(long)]
    pub heads: Option<usize>,
    #[arg(long)]
    pub d_ff: Option<usize>,
}

impl ShapeArgs {
    pub fn apply(&self, mut config: TsaConfig) -> TsaConfig {
        config.d_model = self.d_model.unwrap_or(config.d_model);
        config.n_layers = self.layers.unwrap_or(config.n_layers);
        config.n_heads = self.heads.unwrap_or(config.n_heads);
        config.d_ff = self.d_ff.unwrap_or(config.d_ff);
        config
    }
}

/// The corpus: the flag, else $TSA_CORPUS, else data/tinyshakespeare.txt (where scripts/setup.sh
/// puts Tiny-Shakespeare).
pub fn corpus_path(flag: Option<&PathBuf>) -> PathBuf {
    flag.cloned()
        .or_else(|| {
            std::env::var_os("TSA_CORPUS")
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        })
        .unwrap_or_else(|| PathBuf::from("data/tinyshakespeare.txt"))
}

/// The corpus file's path and bytes; the error says how to get Tiny-Shakespeare.
pub fn read_corpus(flag: Option<&PathBuf>) -> Result<(PathBuf, Vec<u8>)> {
    let path = corpus_path(flag);
    let bytes = std::fs::read(&path).with_context(|| {
        format!(
            "cannot read corpus {} (run scripts/demo once to fetch Tiny-Shakespeare, or pass --corpus)",
            path.display()
        )
    })?;
    Ok((path, bytes))
}

/// The corpus in a checkpoint's vocabulary (`eval`, `analyze`), every error naming the file.
pub fn corpus_for(flag: Option<&PathBuf>, vocab: CharTokenizer, context: usize) -> Result<Corpus> {
    let (path, bytes) = read_corpus(flag)?;
    corpus_from(&path, &bytes, vocab, context)
}

/// The text of the corpus file `path` (its `bytes`) in `vocab`: a checkpoint's or a training
/// state's.
pub fn corpus_from(
    path: &Path,
    bytes: &[u8],
    vocab: CharTokenizer,
    context: usize,
) -> Result<Corpus> {
    let text = std::str::from_utf8(bytes)
        .with_context(|| format!("corpus {} is not UTF-8", path.display()))?;
    Corpus::with_tokenizer(text, vocab, context).with_context(|| {
        format!(
            "corpus {} does not fit the checkpoint's vocabulary",
            path.display()
        )
    })
}

/// Reads a checkpoint written by `train` (or the web app); the error names the file.
pub fn load_checkpoint(path: &Path, device: &Device) -> Result<(TsaModel, CheckpointMeta)> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    checkpoint::from_bytes(&bytes, device).with_context(|| format!("{}", path.display()))
}

/// A flag's value in [0, 1] (a confidence threshold): anything else, NaN included, is refused
/// by clap with this message.
pub fn unit_interval(s: &str) -> std::result::Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if (0.0..=1.0).contains(&v) => Ok(v),
        Ok(v) => Err(format!("{v} is not between 0 and 1")),
        Err(e) => Err(e.to_string()),
    }
}

/// A count of at least 1.
pub fn positive(s: &str) -> std::result::Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

/// A finite flag value of at least 0 (a temperature).
pub fn non_negative(s: &str) -> std::result::Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        Ok(v) => Err(format!("{v} is not a finite number of at least 0")),
        Err(e) => Err(e.to_string()),
    }
}

/// The file a path names, whether or not it exists yet: absolute, links resolved as far as the
/// path exists and `.`/`..` resolved beyond (`a.tsa`, `./new/../a.tsa` and a link to it are one
/// file).
pub fn identity(path: &Path) -> PathBuf {
    use std::path::Component;
    let abs = crate::resume::absolute(path);
    let mut id = PathBuf::new();
    for part in abs.components() {
        match part {
            Component::CurDir => {}
            Component::ParentDir => {
                id.pop();
            }
            other => {
                id.push(other);
                if let Ok(real) = id.canonicalize() {
                    id = real;
                }
            }
        }
    }
    id
}

/// Refuses, before any work, outputs that would overwrite one of the inputs or each other,
/// and outputs that cannot be written (a folder in the way, a file where a folder must go, no
/// permission): a run that can only fail at its end is refused at its start. Nothing is made
/// on disk: the folders are made when the files are written.
pub fn check_outputs(inputs: &[(&str, &Path)], outputs: &[(&str, &Path)]) -> Result<()> {
    for (i, (flag, out)) in outputs.iter().enumerate() {
        let id = identity(out);
        for (what, input) in inputs {
            if identity(input) == id {
                anyhow::bail!(
                    "{flag} {} is the {what}: writing it would destroy it",
                    out.display()
                );
            }
        }
        for (other, earlier) in &outputs[..i] {
            if identity(earlier) == id {
                anyhow::bail!(
                    "{other} and {flag} are the same file, {}: one would overwrite the other",
                    out.display()
                );
            }
        }
    }
    for (flag, out) in outputs {
        writable(out).with_context(|| format!("{flag} {}", out.display()))?;
    }
    Ok(())
}

/// Whether a file can be written at `path`: it names a file, not a folder, and its nearest
/// existing ancestor is a folder this process can create files in.
fn writable(path: &Path) -> Result<()> {
    let ends_in_separator = path
        .as_os_str()
        .to_string_lossy()
        .ends_with(std::path::MAIN_SEPARATOR);
    if path.is_dir() || ends_in_separator || path.file_name().is_none() {
        anyhow::bail!("is a folder (or names none); a file name is needed");
    }
    let mut dir = std::path::absolute(path)?;
    dir.pop();
    while !dir.exists() {
        if !dir.pop() {
            anyhow::bail!("has no existing folder above it");
        }
    }
    if !dir.is_dir() {
        anyhow::bail!(
            "{} is a file, so no folder can be made in it",
            dir.display()
        );
    }
    let probe = dir.join(format!(".tsa-probe-{}", std::process::id()));
    std::fs::File::create(&probe).with_context(|| format!("cannot write in {}", dir.display()))?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outputs_that_would_destroy_a_file_or_cannot_be_written_are_refused() {
        let dir = std::env::temp_dir().join(format!("tsa-outputs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("scratch");
        let corpus = dir.join("corpus.txt");
        std::fs::write(&corpus, "text").expect("corpus");
        let err = |inputs: &[(&str, &Path)], outputs: &[(&str, &Path)]| {
            format!("{:#}", check_outputs(inputs, outputs).expect_err("refused"))
        };
        // The same file under another spelling is still the same file.
        let aliased = dir.join("sub/../corpus.txt");
        std::fs::create_dir_all(dir.join("sub")).expect("sub");
        let e = err(&[("corpus", &corpus)], &[("--log", &aliased)]);
        assert!(e.contains("is the corpus"), "{e}");
        let (out, log) = (dir.join("new/a.tsa"), dir.join("new/./a.tsa"));
        let e = err(&[], &[("--out", &out), ("--log", &log)]);
        assert!(e.contains("--out and --log are the same file"), "{e}");
        // A folder where the file should go, and a file where its folder should be.
        let e = err(&[], &[("--out", &dir)]);
        assert!(e.contains("is a folder"), "{e}");
        let e = err(&[], &[("--out", &corpus.join("deeper/x.tsa"))]);
        assert!(
            e.contains("is a file, so no folder can be made in it"),
            "{e}"
        );
        let e = err(&[], &[("--out", &dir.join("newdir/"))]);
        assert!(e.contains("a file name is needed"), "{e}");
        // `..` through a folder that does not exist yet still lands on the corpus.
        let e = err(
            &[("corpus", &corpus)],
            &[("--log", &dir.join("nothere/../corpus.txt"))],
        );
        assert!(e.contains("is the corpus"), "{e}");
        assert_eq!(std::fs::read_to_string(&corpus).expect("kept"), "text");
        // Distinct writable outputs pass, and the check makes nothing on disk.
        let (a, b) = (dir.join("deep/er/a.tsa"), dir.join("deep/er/a.jsonl"));
        check_outputs(&[("corpus", &corpus)], &[("--out", &a), ("--log", &b)]).expect("fine");
        assert!(!dir.join("deep").exists() && !dir.join("new").exists());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn bounded_values_refuse_what_is_out_of_range() {
        assert_eq!(unit_interval("0.9"), Ok(0.9));
        assert_eq!(unit_interval("1"), Ok(1.0));
        for bad in ["NaN", "-1", "2", "x"] {
            assert!(unit_interval(bad).is_err(), "{bad}");
        }
        assert_eq!(non_negative("0"), Ok(0.0));
        for bad in ["NaN", "-0.5", "inf", ""] {
            assert!(non_negative(bad).is_err(), "{bad}");
        }
    }
}
