//! What the command line writes, and what it refuses to write: no output destroys an input or
//! another output, a path that cannot be written is refused before any training, the log grows
//! at every evaluation, SIGTERM stops a run as Ctrl-C does, and a run whose loss turns NaN says
//! what it kept.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{bench, corpus_in, curve, refused, scratch, text};

const TRAIN: [&str; 6] = ["train", "--recipe", "micro", "--device", "cpu", "--corpus"];

#[test]
fn outputs_never_destroy_an_input_or_each_other() {
    let dir = scratch("clash");
    let p = |name: &str| dir.join(name).to_string_lossy().into_owned();
    let corpus = corpus_in(&dir);
    let before = std::fs::read(&corpus).expect("corpus");
    let train = |extra: &[&str]| -> Vec<String> {
        (TRAIN
            .iter()
            .copied()
            .chain([corpus.as_str(), "--steps", "20"]))
        .chain(extra.iter().copied())
        .map(str::to_string)
        .collect()
    };
    refused(&train(&["--log", &corpus]), "is the corpus");
    refused(
        &train(&["--out", &p("m.tsa"), "--windows-out", &p("m.tsa")]),
        "--out and --windows-out are the same file",
    );
    // Another spelling of the same file is the same file.
    refused(
        &train(&["--out", &p("x/m"), "--log", &p("x/./m")]),
        "--out and --log are the same file",
    );
    // A file where a folder must go: refused at once, before any step is trained.
    let o = bench(&train(&["--out", &format!("{corpus}/m.tsa")]));
    assert!(!o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains("no folder can be made in it"),
        "{}",
        text(&o)
    );
    assert!(
        !text(&o).contains(": val "),
        "trained before refusing: {}",
        text(&o)
    );
    assert_eq!(
        std::fs::read(&corpus).expect("corpus"),
        before,
        "corpus untouched"
    );

    // A model to refuse overwriting.
    let ok = bench(&train(&["--out", &p("m.tsa"), "--log", &p("m.jsonl")]));
    assert!(ok.status.success(), "{}", text(&ok));
    let model = std::fs::read(p("m.tsa")).expect("checkpoint");
    refused(
        &["export", "--checkpoint", &p("m.tsa"), "--out", &p("m.tsa")],
        "is the checkpoint",
    );
    refused(
        &[
            "eval",
            "--checkpoint",
            &p("m.tsa"),
            "--corpus",
            &corpus,
            "--device",
            "cpu",
            "--json",
            &p("m.tsa"),
        ],
        "is the checkpoint",
    );
    refused(
        &["analyze", "--checkpoint", &p("m.tsa"), "--out", &p("m.tsa")],
        "takes a folder",
    );
    assert_eq!(std::fs::read(p("m.tsa")).expect("checkpoint"), model);
    // Values clap refuses: a temperature that is not a number, no windows, a threshold past 1.
    let m = p("m.tsa");
    refused(
        &["sample", "--checkpoint", &m, "--temperature", "NaN"],
        "--temperature",
    );
    refused(
        &["analyze", "--checkpoint", &m, "--windows", "0"],
        "--windows",
    );
    refused(
        &["eval", "--checkpoint", &m, "--threshold", "2"],
        "--threshold",
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[cfg(unix)]
#[test]
fn the_log_grows_at_every_evaluation_and_sigterm_stops_like_ctrl_c() {
    let dir = scratch("term");
    let p = |name: &str| dir.join(name).to_string_lossy().into_owned();
    let corpus = corpus_in(&dir);
    let (out, log) = (p("t.tsa"), p("t.jsonl"));
    let mut child = Command::new(env!("CARGO_BIN_EXE_native-bench"))
        .args(TRAIN.iter().copied().chain([corpus.as_str()]))
        .args([
            "--steps",
            "100000",
            "--eval-every",
            "5",
            "--out",
            &out,
            "--log",
            &log,
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("native-bench starts");
    // The log appears while the run goes on (it used to be written only at the end).
    let deadline = Instant::now() + Duration::from_secs(120);
    while !(Path::new(&log).exists() && curve(Path::new(&log)).len() >= 2) {
        assert!(Instant::now() < deadline, "no log written during the run");
        assert!(
            child.try_wait().expect("wait").is_none(),
            "the run ended early"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let kill = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(kill.success());
    let o = child.wait_with_output().expect("the run ends");
    // Stopped, not finished: a script must be able to tell (130, as a shell reports SIGINT).
    assert_eq!(o.status.code(), Some(130), "{}", text(&o));
    assert!(text(&o).contains("stopped at step"), "{}", text(&o));
    assert!(Path::new(&out).exists() && Path::new(&p("t.state")).exists());
    let steps: Vec<u64> = curve(Path::new(&log)).iter().map(|c| c.0).collect();
    assert!(steps.len() >= 3, "{steps:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_run_whose_loss_turns_nan_keeps_the_last_model_that_evaluated() {
    let dir = scratch("nan");
    let p = |name: &str| dir.join(name).to_string_lossy().into_owned();
    let corpus = corpus_in(&dir);
    let o = bench(
        &(TRAIN.iter().copied().chain([corpus.as_str()]))
            .chain([
                "--steps",
                "20",
                "--lr",
                "1e30",
                "--warmup",
                "0",
                "--eval-every",
                "50",
            ])
            .chain(["--out", &p("n.tsa"), "--log", &p("n.jsonl")])
            .collect::<Vec<_>>(),
    );
    assert!(!o.status.success(), "{}", text(&o));
    let t = text(&o);
    assert!(
        t.contains("loss became NaN") && t.contains("nothing written"),
        "{t}"
    );
    assert!(!Path::new(&p("n.tsa")).exists() && !Path::new(&p("n.jsonl")).exists());
    let _ = std::fs::remove_dir_all(&dir);
}
