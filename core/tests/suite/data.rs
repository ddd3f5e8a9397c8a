use rand::SeedableRng;
use rand::rngs::StdRng;
use tsa_core::TsaError;
use tsa_core::data::corpus::EVAL_SEED;
use tsa_core::data::tasks::{self, Task, TaskSet};
use tsa_core::data::{CharTokenizer, Corpus, Split};

#[test]
fn tokenizer_round_trips_and_sorts_its_vocabulary() {
    let text = "To be, or not to be:\nthat is the question.";
    let tok = CharTokenizer::fit(text).unwrap();
    assert_eq!(
        tok.chars()[0],
        '\n',
        "sorted: newline is index 0, as in the paper"
    );
    let ids = tok.encode(text).unwrap();
    assert_eq!(tok.decode(&ids).unwrap(), text);
    assert!(tok.chars().windows(2).all(|w| w[0] < w[1]));
}

#[test]
fn tokenizer_errors_name_the_problem() {
    let tok = CharTokenizer::fit("abc").unwrap();
    match tok.encode("abz") {
        Err(TsaError::UnknownChar { ch: 'z', .. }) => {}
        other => panic!("expected UnknownChar('z'), got {other:?}"),
    }
    assert!(matches!(
        tok.decode(&[0, 9]),
        Err(TsaError::UnknownToken(9))
    ));
    assert!(matches!(CharTokenizer::fit(""), Err(TsaError::EmptyCorpus)));
}

#[test]
fn corpus_rejects_empty_non_utf8_and_too_short_input() {
    assert!(matches!(
        Corpus::from_bytes(b"", 8),
        Err(TsaError::EmptyCorpus)
    ));
    match Corpus::from_bytes(b"hello \xff world", 2) {
        Err(TsaError::NotUtf8 { offset: 6 }) => {}
        other => panic!("expected NotUtf8 at 6, got {other:?}"),
    }
    let err = Corpus::from_text("short text", 128).unwrap_err();
    assert!(matches!(err, TsaError::CorpusTooShort { .. }), "{err}");
    assert!(err.to_string().contains("a context window plus one"));
}

#[test]
fn splits_are_contiguous_80_10_10() {
    let text: String = (0..1000)
        .map(|i| char::from(b'a' + (i % 26) as u8))
        .collect();
    let c = Corpus::from_text(&text, 8).unwrap();
    assert_eq!(c.split(Split::Train).len(), 800);
    assert_eq!(c.split(Split::Val).len(), 100);
    assert_eq!(c.split(Split::Test).len(), 100);
    let joined: Vec<u32> = [Split::Train, Split::Val, Split::Test]
        .iter()
        .flat_map(|&s| c.split(s).to_vec())
        .collect();
    assert_eq!(c.tokenizer.decode(&joined).unwrap(), text);
}

#[test]
fn batches_are_seeded_windows_with_shifted_targets() {
    let text: String = (0..5000)
        .map(|i| char::from(b'a' + ((i * 7) % 26) as u8))
        .collect();
    let c = Corpus::from_text(&text, 16).unwrap();
    let (x1, y1) = c.sample(Split::Train, 4, 16, &mut StdRng::seed_from_u64(9));
    let (x2, _) = c.sample(Split::Train, 4, 16, &mut StdRng::seed_from_u64(9));
    let (x3, _) = c.sample(Split::Train, 4, 16, &mut StdRng::seed_from_u64(10));
    assert_eq!(x1, x2);
    assert_ne!(x1, x3);
    for row in 0..4 {
        assert_eq!(
            &x1[row * 16 + 1..row * 16 + 16],
            &y1[row * 16..row * 16 + 15]
        );
    }
    assert_eq!(
        c.eval_windows(Split::Val, 2, 3, 16, 1),
        c.eval_windows(Split::Val, 2, 3, 16, 1)
    );
}

#[test]
fn the_window_log_replays_the_batches_a_run_draws() {
    let text: String = (0..5000)
        .map(|i| char::from(b'a' + ((i * 11 + i / 7) % 26) as u8))
        .collect();
    let c = Corpus::from_text(&text, 16).unwrap();
    let log = c.window_log(3, 4, 16, 77, 2);
    assert_eq!((log.train.len(), log.val.len(), log.context), (3, 2, 16));
    // A trainer's batch RNG, seeded the same, draws exactly the logged windows, step by step.
    let mut rng = StdRng::seed_from_u64(77);
    for starts in &log.train {
        let (x, _) = c.sample(Split::Train, 4, 16, &mut rng);
        let train = c.split(Split::Train);
        let expected: Vec<i32> = starts
            .iter()
            .flat_map(|&s| train[s..s + 16].iter().map(|&t| t as i32))
            .collect();
        assert_eq!(x, expected);
    }
    // The validation windows are the evaluation's.
    let val = c.split(Split::Val);
    for (starts, (x, _)) in log
        .val
        .iter()
        .zip(c.eval_windows(Split::Val, 2, 4, 16, EVAL_SEED))
    {
        let expected: Vec<i32> = starts
            .iter()
            .flat_map(|&s| val[s..s + 16].iter().map(|&t| t as i32))
            .collect();
        assert_eq!(x, expected);
    }
}

#[test]
fn a_100_mb_corpus_with_thousands_of_characters_loads() {
    // enwik8-like: 10^8 bytes, 6,064 distinct characters (mostly ASCII, some multi-byte).
    let rare: Vec<char> = (0..6064u32 - 96)
        .filter_map(|i| char::from_u32(0x4E00 + i))
        .collect();
    let mut text = String::with_capacity(100_000_000);
    let mut i = 0usize;
    while text.len() < 100_000_000 - 4 {
        if i.is_multiple_of(50) {
            text.push(rare[(i / 50) % rare.len()]);
        } else {
            text.push(char::from(32 + (i % 95) as u8));
        }
        i += 1;
    }
    text.push('\n');
    let c = Corpus::from_text(&text, 256).unwrap();
    assert_eq!(c.tokenizer.vocab_size(), 6064);
    assert!(text.len() >= 99_999_990);
    let (x, _) = c.sample(Split::Train, 2, 256, &mut StdRng::seed_from_u64(0));
    assert!(x.iter().all(|&id| (id as usize) < 6064));
}

#[test]
fn copy_and_sort_sequences_have_the_paper_layout() {
    let src = [9, 4, 4, 31, 3, 12, 7, 7, 20, 5];
    let copy = Task::Copy.sequence(&src);
    let sort = Task::Sort.sequence(&src);
    assert_eq!(copy.len(), tasks::FULL_LEN);
    assert_eq!(copy[0], tasks::BOS);
    assert_eq!(copy[11], tasks::SEP);
    assert_eq!(copy[22], tasks::EOS);
    assert_eq!(&copy[12..22], &src);
    assert_eq!(&sort[12..22], &[3, 4, 4, 5, 7, 7, 9, 12, 20, 31]);
    // Loss only where the target is tgt or EOS.
    let mask = tasks::loss_mask_row();
    let (_, targets, _) = TaskSet::rows(std::slice::from_ref(&sort));
    let scored: Vec<u32> = targets
        .iter()
        .zip(&mask)
        .filter(|(_, m)| **m == 1.0)
        .map(|(t, _)| *t as u32)
        .collect();
    assert_eq!(&scored[..10], &sort[12..22]);
    assert_eq!(scored[10], tasks::EOS);
    assert_eq!(scored.len(), 11);
}

#[test]
fn task_sets_are_seeded_and_held_out_is_disjoint() {
    let a = TaskSet::generate(Task::Sort, 500, 100, 3);
    let b = TaskSet::generate(Task::Sort, 500, 100, 3);
    assert_eq!(a.train, b.train);
    let train: std::collections::HashSet<_> = a.train.iter().collect();
    assert!(a.test.iter().all(|s| !train.contains(s)));
    assert!(
        a.train
            .iter()
            .flatten()
            .all(|&t| (t as usize) < tasks::VOCAB_SIZE)
    );
}
