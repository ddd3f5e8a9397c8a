//! Where a run's batches come from: a character corpus or a synthetic task set (the role of
//! Burn's `Batcher`: the trainer and the CLI only ever see `Batch`es on a device).

use burn::tensor::Device;
use rand::rngs::StdRng;

use crate::data::batch::Batch;
use crate::data::corpus::{Corpus, Split};
use crate::data::tasks::{self, TaskSet};

/// Held-out task sequences per evaluation batch.
const TASK_EVAL_BATCH: usize = 100;

pub enum Data {
    Lm(Corpus),
    Task(TaskSet),
}

impl Data {
    pub fn vocab_size(&self) -> usize {
        match self {
            Data::Lm(c) => c.tokenizer.vocab_size(),
            Data::Task(_) => tasks::VOCAB_SIZE,
        }
    }

    /// A random training batch (a task's sequences have their own length; `context` is the
    /// corpus window).
    pub fn train_batch(
        &self,
        batch: usize,
        context: usize,
        rng: &mut StdRng,
        device: &Device,
    ) -> Batch {
        match self {
            Data::Lm(c) => c.batch(Split::Train, batch, context, rng, device),
            Data::Task(t) => t.batch(batch, rng, device),
        }
    }

    /// Advances `rng` past `steps` training batches without building them, drawing exactly what
    /// [`Self::train_batch`] draws: a resumed run then sees the batches an uninterrupted one
    /// would.
    pub fn skip_train_batches(&self, steps: usize, batch: usize, context: usize, rng: &mut StdRng) {
        for _ in 0..steps {
            match self {
                Data::Lm(c) => {
                    c.starts(Split::Train, batch, context, rng);
                }
                Data::Task(t) => {
                    t.sample(batch, rng);
                }
            }
        }
    }

    /// Fixed evaluation batches: `n` seeded validation batches, or the whole held-out task set.
    pub fn eval_set(&self, n: usize, batch: usize, context: usize, device: &Device) -> Vec<Batch> {
        match self {
            Data::Lm(c) => c.eval_batches(n, batch, context, device),
            Data::Task(t) => t.test_batches(TASK_EVAL_BATCH, device),
        }
    }
}
