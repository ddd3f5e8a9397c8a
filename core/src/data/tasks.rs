//! Synthetic algorithmic tasks (§3.1): copy and sort of length-10 sequences over a 32-token
//! vocabulary, laid out as `[BOS] src [SEP] tgt [EOS]`, with the loss masked on the source.

use std::collections::HashSet;

use burn::tensor::Device;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

use crate::data::batch::Batch;

pub const BOS: u32 = 0;
pub const SEP: u32 = 1;
pub const EOS: u32 = 2;
/// Tokens 3…31 are the symbols.
pub const FIRST_SYMBOL: u32 = 3;
pub const VOCAB_SIZE: usize = 32;
pub const SRC_LEN: usize = 10;
/// Whole sequence: BOS + src + SEP + tgt + EOS.
pub const FULL_LEN: usize = 2 * SRC_LEN + 3;
/// Model input length: the sequence without its last token.
pub const SEQ_LEN: usize = FULL_LEN - 1;
/// First input position whose target is part of `tgt [EOS]` (the target at SEP's position).
pub const FIRST_SCORED: usize = SRC_LEN + 1;

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum Task {
    Copy,
    Sort,
}

impl Task {
    pub fn target(self, src: &[u32]) -> Vec<u32> {
        let mut tgt = src.to_vec();
        if self == Task::Sort {
            tgt.sort_unstable();
        }
        tgt
    }

    /// One full sequence `[BOS] src [SEP] tgt [EOS]`.
    pub fn sequence(self, src: &[u32]) -> Vec<u32> {
        let mut seq = Vec::with_capacity(FULL_LEN);
        seq.push(BOS);
        seq.extend_from_slice(src);
        seq.push(SEP);
        seq.extend(self.target(src));
        seq.push(EOS);
        seq
    }
}

/// Loss mask of one input row: 0 on the source, 1 where the target is `tgt` or `EOS`.
pub fn loss_mask_row() -> Vec<f32> {
    (0..SEQ_LEN)
        .map(|j| if j >= FIRST_SCORED { 1.0 } else { 0.0 })
        .collect()
}

/// Seeded train and held-out sets of distinct sequences.
#[derive(Debug, Clone)]
pub struct TaskSet {
    pub task: Task,
    pub train: Vec<Vec<u32>>,
    pub test: Vec<Vec<u32>>,
}

impl TaskSet {
    /// The paper's sizes are 10,000 train and 1,000 held-out sequences. Held-out sources never
    /// appear in training.
    pub fn generate(task: Task, n_train: usize, n_test: usize, seed: u64) -> Self {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut seen = HashSet::new();
        let mut draw = |n: usize| {
            let mut out = Vec::with_capacity(n);
            while out.len() < n {
                let src: Vec<u32> = (0..SRC_LEN)
                    .map(|_| rng.random_range(FIRST_SYMBOL..VOCAB_SIZE as u32))
                    .collect();
                if seen.insert(src.clone()) {
                    out.push(task.sequence(&src));
                }
            }
            out
        };
        let train = draw(n_train);
        let test = draw(n_test);
        Self { task, train, test }
    }

    /// Flattened (inputs, targets, mask) rows of the sequences `rows`.
    pub fn rows(seqs: &[Vec<u32>]) -> (Vec<i32>, Vec<i32>, Vec<f32>) {
        let mut inputs = Vec::with_capacity(seqs.len() * SEQ_LEN);
        let mut targets = Vec::with_capacity(seqs.len() * SEQ_LEN);
        let mut mask = Vec::with_capacity(seqs.len() * SEQ_LEN);
        for s in seqs {
            inputs.extend(s[..SEQ_LEN].iter().map(|&x| x as i32));
            targets.extend(s[1..].iter().map(|&x| x as i32));
            mask.extend(loss_mask_row());
        }
        (inputs, targets, mask)
    }

    /// A random training batch.
    pub fn sample(&self, batch: usize, rng: &mut StdRng) -> (Vec<i32>, Vec<i32>, Vec<f32>) {
        let picked: Vec<Vec<u32>> = (0..batch)
            .map(|_| self.train[rng.random_range(0..self.train.len())].clone())
            .collect();
        Self::rows(&picked)
    }

    /// [`Self::rows`] as a batch on `device`.
    pub fn batch_of(seqs: &[Vec<u32>], device: &Device) -> Batch {
        let (x, y, m) = Self::rows(seqs);
        Batch::new(x, y, Some(m), SEQ_LEN, device)
    }

    /// A random training batch on `device`.
    pub fn batch(&self, batch: usize, rng: &mut StdRng, device: &Device) -> Batch {
        let (x, y, m) = self.sample(batch, rng);
        Batch::new(x, y, Some(m), SEQ_LEN, device)
    }

    /// The whole held-out set in batches of `batch` sequences.
    pub fn test_batches(&self, batch: usize, device: &Device) -> Vec<Batch> {
        self.test
            .chunks(batch.max(1))
            .map(|rows| Self::batch_of(rows, device))
            .collect()
    }
}
