//! One training run in the page: the model, its optimiser, the corpus, and what the UI asks of
//! them (a step, an evaluation, the routing of a passage, a generation, a checkpoint). No UI here.

use std::rc::Rc;

use burn::tensor::{Device, Int, Tensor, TensorData};
use rand::SeedableRng;
use rand::rngs::StdRng;
use tsa_core::checkpoint::{self, CheckpointMeta};
use tsa_core::data::{Batch, CharTokenizer, Corpus, Split};
use tsa_core::generate;
use tsa_core::{EvalStats, Execution, StepStats, TrainConfig, Trainer, TsaConfig, read};

use crate::protocol::TokenView;
use crate::settings::{Settings, fits_in_page};

/// Validation windows per evaluation (fixed and seeded, so evaluations are comparable).
const EVAL_BATCHES: usize = 2;
/// Characters of the validation passage shown in the heatmap: several contexts, routed as
/// consecutive windows of one batch (each window attends only within itself, as in training).
const PASSAGE_CHARS: usize = 256;

pub struct Session {
    pub trainer: Trainer,
    pub tokenizer: CharTokenizer,
    corpus: Rc<Corpus>,
    rng: StdRng,
    eval: Vec<(Vec<i32>, Vec<i32>)>,
    batch: usize,
}

impl Session {
    /// A fresh model for `settings` on `device`, trained on `text`.
    pub fn new(settings: &Settings, text: &str, device: &Device) -> Result<Self, String> {
        let corpus = Corpus::from_text(text, settings.context).map_err(|e| e.to_string())?;
        let model = settings.model(corpus.tokenizer.vocab_size())?;
        let train = settings.train()?;
        fits_in_page(&model, train.batch_size)?;
        let trainer = Trainer::new(&model, train, device).map_err(|e| e.to_string())?;
        Ok(Self::assemble(trainer, Rc::new(corpus)))
    }

    /// Continues from a checkpoint (uploaded, or a snapshot moved to another device). The text
    /// must be writable in the checkpoint's vocabulary; otherwise nothing changes.
    pub fn from_checkpoint(
        bytes: &[u8],
        text: &str,
        train: TrainConfig,
        device: &Device,
    ) -> Result<Self, String> {
        let meta = checkpoint::read_meta(bytes).map_err(|e| e.to_string())?;
        // Before any weight is allocated: a header can describe any size.
        fits_in_page(&meta.config, train.batch_size)?;
        let Some(vocab) = meta.vocab.clone() else {
            return Err(
                "this checkpoint is a synthetic-task model (no character vocabulary); \
                        the page trains character models"
                    .into(),
            );
        };
        let corpus = Corpus::with_tokenizer(text, vocab, meta.config.context).map_err(|e| {
            format!("the current text does not fit the checkpoint's vocabulary: {e}")
        })?;
        Self::load(bytes, Rc::new(corpus), train, device)
    }

    /// This run continued from `bytes` (its own checkpoint) on `device`, on the corpus it
    /// trained on — not on a text the visitor has loaded since, which waits for the next Start.
    pub fn moved(&self, bytes: &[u8], train: TrainConfig, device: &Device) -> Result<Self, String> {
        Self::load(bytes, self.corpus.clone(), train, device)
    }

    fn load(
        bytes: &[u8],
        corpus: Rc<Corpus>,
        train: TrainConfig,
        device: &Device,
    ) -> Result<Self, String> {
        let device = device.clone().autodiff();
        let (model, meta) = checkpoint::from_bytes(bytes, &device).map_err(|e| e.to_string())?;
        if meta.vocab.as_ref() != Some(&corpus.tokenizer) {
            return Err("the checkpoint's vocabulary is not the corpus's".into());
        }
        // Up to the form's steps; a model already there is done (was: one more step, at the
        // schedule's floor, shown as "N / N+1").
        let steps = train.steps.max(meta.step);
        let train = train.with_steps(steps);
        let trainer = Trainer::from_model(model, train, meta.step);
        Ok(Self::assemble(trainer, corpus))
    }

    fn assemble(trainer: Trainer, corpus: Rc<Corpus>) -> Self {
        let context = trainer.model.config.context;
        let batch = trainer.config.batch_size;
        let seed = trainer.config.seed;
        let eval = corpus.eval_windows(Split::Val, EVAL_BATCHES, batch, context, seed);
        Self {
            tokenizer: corpus.tokenizer.clone(),
            corpus,
            rng: StdRng::seed_from_u64(seed ^ trainer.step as u64),
            eval,
            batch,
            trainer,
        }
    }

    pub fn config(&self) -> &TsaConfig {
        &self.trainer.model.config
    }

    pub fn step_count(&self) -> usize {
        self.trainer.step
    }

    pub fn total_steps(&self) -> usize {
        self.trainer.config.steps
    }

    pub fn done(&self) -> bool {
        self.trainer.step >= self.trainer.config.steps
    }

    fn device(&self) -> Device {
        self.trainer.model.device()
    }

    fn batch(&self, rows: &(Vec<i32>, Vec<i32>), device: &Device) -> Batch {
        let t = self.config().context;
        Batch::new(rows.0.clone(), rows.1.clone(), None, t, device)
    }

    /// One optimiser step on a fresh random training batch.
    pub async fn step(&mut self) -> Result<StepStats, String> {
        let (context, device) = (self.config().context, self.device());
        let batch = self
            .corpus
            .batch(Split::Train, self.batch, context, &mut self.rng, &device);
        self.trainer.step(&batch).await.map_err(|e| e.to_string())
    }

    /// Validation loss, BPC, α and TLOps saved with the training-time gates (noise off), and
    /// for models with routers the validation loss with the inference rule executed (by masking:
    /// no host read, any backend; the same numbers as sparse execution).
    pub async fn evaluate(&self) -> Result<(EvalStats, Option<f64>), String> {
        let model = self.trainer.inference_model();
        let device = model.device();
        let batches: Vec<Batch> = self.eval.iter().map(|r| self.batch(r, &device)).collect();
        let run = |exec| tsa_core::evaluate(&model, &batches, exec);
        let soft = run(Execution::Soft).await.map_err(|e| e.to_string())?;
        let routing = model.config.routing;
        let executed = match routing.has_routers() {
            true => Some(
                run(Execution::Hard(routing.keep_scale()))
                    .await
                    .map_err(|e| e.to_string())?
                    .loss,
            ),
            false => None,
        };
        Ok((soft, executed))
    }

    /// The opening of the validation split with each character's halting probabilities.
    pub async fn passage(&self) -> Result<Vec<TokenView>, String> {
        let context = self.config().context;
        let val = self.corpus.split(Split::Val);
        // Whole windows only: every character is routed with the same kind of context.
        let n = (PASSAGE_CHARS.min(val.len()) / context).max(1) * context;
        self.route(&val[..n.min(val.len())]).await
    }

    /// p_l at every router for each token of `ids` (soft gates), in windows of one context.
    pub async fn route(&self, ids: &[u32]) -> Result<Vec<TokenView>, String> {
        let context = self.config().context;
        let (rows, t) = match ids.len() {
            n if n <= context => (1, n),
            n => (n / context, context),
        };
        let ids = &ids[..rows * t];
        let model = self.trainer.inference_model();
        let device = model.device();
        let data = TensorData::new(ids.iter().map(|&t| t as i32).collect(), [rows, t]);
        let out = model.forward(Tensor::<2, Int>::from_data(data, &device), Execution::Soft);
        let routers = out.halting.len();
        // [routers · rows · t]: router-major, then the windows in order.
        let p = match routers {
            0 => Vec::new(),
            _ => read::floats(Tensor::cat(out.halting, 0))
                .await
                .map_err(|e| e.to_string())?,
        };
        let chars = self.tokenizer.decode(ids).map_err(|e| e.to_string())?;
        let n = ids.len();
        Ok(chars
            .chars()
            .enumerate()
            .map(|(i, ch)| TokenView {
                index: i,
                ch,
                p: (0..routers).map(|l| p[l * n + i]).collect(),
            })
            .collect())
    }

    /// `n` characters continuing a validation prompt, each with its routers' probabilities, and
    /// the share of routed updates that ran. `sparse` runs only blocks whose router kept the token.
    pub async fn generate(
        &mut self,
        n: usize,
        sparse: bool,
    ) -> Result<(Vec<TokenView>, f64), String> {
        let prompt_len = 32.min(self.config().context);
        let prompt = self.corpus.split(Split::Val)[..prompt_len].to_vec();
        let model = self.trainer.inference_model();
        // Sparse generation skips halted tokens' blocks (one token at a time: no gather/scatter).
        let exec = match sparse {
            true => Execution::Sparse(model.config.routing.keep_scale()),
            false => Execution::Soft,
        };
        let generation = generate::generate(&model, &prompt, n, 0.8, exec, &mut self.rng)
            .await
            .map_err(|e| e.to_string())?;
        let text = self
            .tokenizer
            .decode(&generation.tokens)
            .map_err(|e| e.to_string())?;
        let tokens = text
            .chars()
            .zip(
                generation
                    .halting
                    .iter()
                    .chain(std::iter::repeat(&Vec::new())),
            )
            .enumerate()
            .map(|(i, (ch, p))| TokenView {
                index: i,
                ch,
                p: p.clone(),
            })
            .collect();
        Ok((tokens, generation.alpha))
    }

    /// The checkpoint file (`native-bench train` writes and reads the same format).
    pub async fn checkpoint(&self) -> Result<Vec<u8>, String> {
        let meta = CheckpointMeta {
            config: self.config().clone(),
            vocab: Some(self.tokenizer.clone()),
            step: self.trainer.step,
        };
        checkpoint::to_bytes(&self.trainer.inference_model(), &meta)
            .await
            .map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::{Preset, Settings};
    use wasm_bindgen_test::wasm_bindgen_test;

    #[wasm_bindgen_test]
    async fn a_moved_run_keeps_its_own_corpus_whatever_text_the_page_holds_now() {
        let text = "To be, or not to be, that is the question:\n".repeat(40);
        let settings = Settings::preset(Preset::Micro);
        let device = Device::flex();
        let mut run = Session::new(&settings, &text, &device).expect("a session");
        run.step().await.expect("a step");
        let bytes = run.checkpoint().await.expect("a checkpoint");
        let train = run.trainer.config.clone();
        // The visitor has loaded a text in another alphabet since: it cannot hold this model…
        let other = "0123456789 ".repeat(100);
        assert!(Session::from_checkpoint(&bytes, &other, train.clone(), &device).is_err());
        // …but the run moves on the text it trained on, with the same numbers.
        let moved = run.moved(&bytes, train, &device).expect("moved");
        assert_eq!(moved.step_count(), run.step_count());
        assert_eq!(moved.corpus.len(), run.corpus.len());
        let loss = |r: (EvalStats, Option<f64>)| r.0.loss;
        let before = loss(run.evaluate().await.expect("evaluates"));
        let after = loss(moved.evaluate().await.expect("evaluates"));
        assert!((before - after).abs() < 1e-5, "{before} vs {after}");
        // A model already at the form's steps is done, not one step short of it.
        let at_end = run.trainer.config.clone().with_steps(1);
        let loaded = Session::from_checkpoint(&bytes, &text, at_end, &device).expect("loads");
        assert_eq!((loaded.step_count(), loaded.total_steps()), (1, 1));
        assert!(loaded.done());
    }
}
