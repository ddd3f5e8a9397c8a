//! A character corpus, its contiguous 80/10/10 train/val/test split, and seeded random windows.

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

use burn::tensor::Device;

use crate::data::batch::Batch;
use crate::data::tokenizer::CharTokenizer;
use crate::error::{Result, TsaError};

/// Seed of the fixed validation windows every evaluation of a corpus run uses.
pub const EVAL_SEED: u64 = 4242;

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Split {
    Train,
    Val,
    Test,
}

/// A run's windows as offsets into the train and validation splits ([`Corpus::window_log`]).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct WindowLog {
    pub context: usize,
    /// One list of window offsets per training step.
    pub train: Vec<Vec<usize>>,
    /// One list per validation batch.
    pub val: Vec<Vec<usize>>,
}

/// The encoded corpus with its split boundaries.
#[derive(Debug, Clone)]
pub struct Corpus {
    pub tokenizer: CharTokenizer,
    tokens: Vec<u32>,
    val_start: usize,
    test_start: usize,
}

impl Corpus {
    /// From raw bytes: refuses non-UTF-8 (saying where) and empty input.
    pub fn from_bytes(bytes: &[u8], context: usize) -> Result<Self> {
        let text = std::str::from_utf8(bytes).map_err(|e| TsaError::NotUtf8 {
            offset: e.valid_up_to(),
        })?;
        Self::from_text(text, context)
    }

    /// Fits the tokenizer on the whole text and splits 80/10/10 contiguously. Every split must
    /// hold at least one window of `context + 1` characters.
    pub fn from_text(text: &str, context: usize) -> Result<Self> {
        let tokenizer = CharTokenizer::fit(text)?;
        Self::with_tokenizer(text, tokenizer, context)
    }

    /// Encodes `text` with an existing vocabulary (e.g. a checkpoint's).
    pub fn with_tokenizer(text: &str, tokenizer: CharTokenizer, context: usize) -> Result<Self> {
        if text.is_empty() {
            return Err(TsaError::EmptyCorpus);
        }
        let tokens = tokenizer.encode(text)?;
        let n = tokens.len();
        let (val_start, test_start) = (n * 8 / 10, n * 9 / 10);
        let smallest = val_start.min(test_start - val_start).min(n - test_start);
        if smallest < context + 1 {
            // Each tenth must hold a window: the whole text needs about 10 × (context + 1).
            return Err(TsaError::CorpusTooShort {
                len: n,
                needed: 10 * (context + 1),
            });
        }
        Ok(Self {
            tokenizer,
            tokens,
            val_start,
            test_start,
        })
    }

    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    pub fn split(&self, split: Split) -> &[u32] {
        match split {
            Split::Train => &self.tokens[..self.val_start],
            Split::Val => &self.tokens[self.val_start..self.test_start],
            Split::Test => &self.tokens[self.test_start..],
        }
    }

    /// `batch` windows of `context` inputs and their next-character targets, starting at
    /// uniformly random offsets drawn from `rng`. Rows are flattened [batch · context].
    pub fn sample(
        &self,
        split: Split,
        batch: usize,
        context: usize,
        rng: &mut StdRng,
    ) -> (Vec<i32>, Vec<i32>) {
        self.windows_at(split, context, &self.starts(split, batch, context, rng))
    }

    /// The windows of `context` inputs and targets starting at `starts` in `split`, flattened.
    fn windows_at(&self, split: Split, context: usize, starts: &[usize]) -> (Vec<i32>, Vec<i32>) {
        let data = self.split(split);
        let mut inputs = Vec::with_capacity(starts.len() * context);
        let mut targets = Vec::with_capacity(starts.len() * context);
        for &s in starts {
            inputs.extend(data[s..s + context].iter().map(|&x| x as i32));
            targets.extend(data[s + 1..s + context + 1].iter().map(|&x| x as i32));
        }
        (inputs, targets)
    }

    /// The offsets (into `split`) of the `batch` windows that [`Self::sample`] draws next from
    /// `rng`: what a run records to replay its exact batch stream elsewhere (the PyTorch twin).
    pub fn starts(
        &self,
        split: Split,
        batch: usize,
        context: usize,
        rng: &mut StdRng,
    ) -> Vec<usize> {
        let max_start = self.split(split).len() - context - 1;
        (0..batch)
            .map(|_| rng.random_range(0..=max_start))
            .collect()
    }

    /// A fixed, seeded set of evaluation windows: the same every time for the same arguments.
    pub fn eval_windows(
        &self,
        split: Split,
        n_batches: usize,
        batch: usize,
        context: usize,
        seed: u64,
    ) -> Vec<(Vec<i32>, Vec<i32>)> {
        self.seeded_starts(split, n_batches, batch, context, seed)
            .iter()
            .map(|starts| self.windows_at(split, context, starts))
            .collect()
    }

    /// The offsets of `n_batches` batches drawn in turn from one RNG seeded with `seed`: a
    /// trainer's batch stream, or the evaluation windows.
    fn seeded_starts(
        &self,
        split: Split,
        n_batches: usize,
        batch: usize,
        context: usize,
        seed: u64,
    ) -> Vec<Vec<usize>> {
        let mut rng = StdRng::seed_from_u64(seed);
        (0..n_batches)
            .map(|_| self.starts(split, batch, context, &mut rng))
            .collect()
    }

    /// Every window a run of `steps` steps sees, as offsets: the training batches a trainer
    /// seeded with `seed` draws (its batch RNG serves nothing else) and the validation windows
    /// of [`Self::eval_batches`]. The PyTorch twin replays them (`torch_twin.py --windows`) so
    /// that two implementations can be compared on one batch stream.
    pub fn window_log(
        &self,
        steps: usize,
        batch: usize,
        context: usize,
        seed: u64,
        eval_batches: usize,
    ) -> WindowLog {
        WindowLog {
            context,
            train: self.seeded_starts(Split::Train, steps, batch, context, seed),
            val: self.seeded_starts(Split::Val, eval_batches, batch, context, EVAL_SEED),
        }
    }

    /// A random batch of windows from `split` on `device` (nanoGPT's `get_batch`).
    pub fn batch(
        &self,
        split: Split,
        batch: usize,
        context: usize,
        rng: &mut StdRng,
        device: &Device,
    ) -> Batch {
        let (x, y) = self.sample(split, batch, context, rng);
        Batch::new(x, y, None, context, device)
    }

    /// The validation batches every evaluation of a corpus run uses: [`Self::eval_windows`]
    /// of the validation split under [`EVAL_SEED`], on `device`.
    pub fn eval_batches(
        &self,
        n_batches: usize,
        batch: usize,
        context: usize,
        device: &Device,
    ) -> Vec<Batch> {
        self.eval_windows(Split::Val, n_batches, batch, context, EVAL_SEED)
            .into_iter()
            .map(|(x, y)| Batch::new(x, y, None, context, device))
            .collect()
    }
}
