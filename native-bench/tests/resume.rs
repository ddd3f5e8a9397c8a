//! `train --stop-at` then `train --resume`: the run split in two ends where the whole run ends,
//! and what cannot be resumed is refused with a message.

mod common;

use std::path::Path;

use common::{bench, corpus_in, curve, refused, scratch, text};

#[test]
fn a_run_stopped_and_resumed_ends_where_the_whole_run_ends() {
    let dir = scratch("train");
    let p = |name: &str| dir.join(name).to_string_lossy().into_owned();
    let corpus = corpus_in(&dir);
    let other = p("other.txt");
    std::fs::write(
        &other,
        "A different text, long enough to be a corpus.\n".repeat(30),
    )
    .expect("corpus");
    // Straight-through with a compute target: μ and the optimiser's moments must carry over.
    let run = [
        "train",
        "--recipe",
        "micro",
        "--routing",
        "tsa",
        "--gate",
        "straight-through",
        "--lambda",
        "0",
        "--target",
        "0.5",
        "--steps",
        "30",
        "--eval-every",
        "10",
        "--device",
        "cpu",
        "--corpus",
        &corpus,
    ];
    let train = |extra: &[&str]| {
        let all: Vec<&str> = run.iter().chain(extra).copied().collect();
        bench(&all)
    };

    let whole = train(&["--out", &p("a.tsa"), "--log", &p("a.jsonl")]);
    assert!(whole.status.success(), "{}", text(&whole));
    assert!(
        !Path::new(&p("a.state")).exists(),
        "a complete run keeps no state"
    );

    let first = train(&[
        "--out",
        &p("b.tsa"),
        "--log",
        &p("b1.jsonl"),
        "--stop-at",
        "15",
    ]);
    assert!(first.status.success(), "{}", text(&first));
    assert!(
        text(&first).contains("stopped at step 15 of 30"),
        "{}",
        text(&first)
    );
    assert!(Path::new(&p("b.state")).exists() && Path::new(&p("b.tsa")).exists());
    assert_eq!(
        curve(Path::new(&p("b1.jsonl"))).last().map(|c| c.0),
        Some(15)
    );

    // Refused, and the state is kept: a new run over it, a recipe flag beside --resume,
    // another corpus.
    let (b_tsa, b2) = (p("b.tsa"), p("b2.jsonl"));
    let over: Vec<&str> = (run.iter().copied())
        .chain(["--out", &b_tsa, "--log", &b2])
        .collect();
    refused(&over, "holds a stopped run's training state");
    let state = p("b.state");
    refused(
        &["train", "--resume", &state, "--steps", "50"],
        "cannot be used with",
    );
    let resume = |extra: &[&str]| -> Vec<String> {
        ["train", "--resume", &state, "--device", "cpu"]
            .iter()
            .chain(extra)
            .map(|s| s.to_string())
            .collect()
    };
    refused(
        &resume(&["--corpus", &other]),
        "not the corpus this run trained on",
    );
    refused(
        &resume(&["--corpus", &corpus, "--stop-at", "12"]),
        "--stop-at 12 must be after",
    );
    // Another run's state is not overwritten by a resumed one either.
    let other_state = p("other.state");
    std::fs::copy(&state, &other_state).expect("copy");
    refused(
        &resume(&["--corpus", &corpus, "--state", &other_state]),
        "holds a stopped run's training state",
    );
    std::fs::remove_file(&other_state).expect("remove");

    // Without --out and --log: the stopped run's own files.
    let rest = bench(&[
        "train",
        "--resume",
        &p("b.state"),
        "--device",
        "cpu",
        "--corpus",
        &corpus,
    ]);
    assert!(rest.status.success(), "{}", text(&rest));
    assert!(text(&rest).contains("resuming"), "{}", text(&rest));
    assert!(
        !Path::new(&p("b.state")).exists(),
        "the state goes once the run completes"
    );

    let a = curve(Path::new(&p("a.jsonl")));
    let b = curve(Path::new(&p("b1.jsonl")));
    assert_eq!(
        b.iter().map(|c| c.0).collect::<Vec<_>>(),
        vec![10, 15, 20, 30],
        "the resumed log holds the whole curve, the stop included"
    );
    for (step, loss) in &a {
        let resumed = b.iter().find(|c| c.0 == *step).map(|c| c.1);
        assert!(
            resumed.is_some_and(|l| (l - loss).abs() < 1e-6),
            "step {step}: whole run {loss}, stopped and resumed {resumed:?}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn reproduce_with_resume_continues_a_stopped_arm_and_reads_back_finished_ones() {
    let dir = scratch("reproduce");
    let p = |name: &str| dir.join(name).to_string_lossy().into_owned();
    let corpus = corpus_in(&dir);
    let out = p("results");
    let reproduce = |extra: &[&str]| {
        let mut args = vec![
            "reproduce",
            "table4",
            "--scale",
            "quick",
            "--device",
            "cpu",
            "--corpus",
            &corpus,
            "--out",
            &out,
        ];
        args.extend_from_slice(extra);
        bench(&args)
    };
    let without_seconds = |path: &str| -> Vec<serde_json::Value> {
        let arms: Vec<serde_json::Value> =
            serde_json::from_str(&std::fs::read_to_string(path).expect("table written"))
                .expect("JSON");
        arms.into_iter()
            .map(|mut a| {
                a.as_object_mut()
                    .expect("an arm is an object")
                    .remove("seconds");
                a
            })
            .collect()
    };

    // Table 4's first arm (the dense baseline) stopped at step 1 of 3, as Ctrl-C leaves it: the
    // same recipe trained by `train`, its state where reproduce keeps the arm's.
    let arm_state = p("results/table4-arms/01.state");
    let stopped = bench(&[
        "train",
        "--recipe",
        "quick",
        "--routing",
        "dense",
        "--steps",
        "3",
        "--stop-at",
        "1",
        "--device",
        "cpu",
        "--corpus",
        &corpus,
        "--out",
        &p("dense.tsa"),
        "--log",
        &p("dense.jsonl"),
        "--state",
        &arm_state,
    ]);
    assert!(stopped.status.success(), "{}", text(&stopped));

    let first = reproduce(&["--steps", "3", "--resume"]);
    assert!(first.status.success(), "{}", text(&first));
    assert!(
        text(&first).contains("resuming at step 1 of 3"),
        "{}",
        text(&first)
    );
    assert!(
        !Path::new(&arm_state).exists(),
        "a finished arm's state goes"
    );
    let table = p("results/table4.json");
    let trained = without_seconds(&table);
    assert_eq!(trained.len(), 3);
    assert!(
        trained[2]["threshold"].is_number(),
        "early exit's threshold: {:?}",
        trained[2]
    );

    let again = reproduce(&["--steps", "3", "--resume"]);
    assert!(again.status.success(), "{}", text(&again));
    assert_eq!(
        text(&again).matches("finished in an earlier run").count(),
        3,
        "{}",
        text(&again)
    );
    assert_eq!(without_seconds(&table), trained, "read back, not retrained");

    // Another budget is another recipe: nothing is reused.
    let other = reproduce(&["--steps", "4", "--resume"]);
    assert!(other.status.success(), "{}", text(&other));
    assert_eq!(
        text(&other).matches("kept for another recipe").count(),
        3,
        "{}",
        text(&other)
    );
    let _ = std::fs::remove_dir_all(&dir);
}
