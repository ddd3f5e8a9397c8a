//! The worker's one task: it owns the session and trains one step at a time between commands,
//! yielding after each step so that queued commands (Pause, Generate, …) are read promptly.

use futures::StreamExt;
use futures::channel::mpsc::UnboundedReceiver;

use super::backend::{self, Backend};
use super::post;
use super::session::Session;
use crate::js;
use crate::protocol::{Command, Event, Kind, Status, StepView};
use crate::settings::Settings;
use tsa_core::EvalStats;

/// Characters written by Generate.
const GENERATE_CHARS: usize = 200;
/// How long "open a model by URL" waits for the server.
const FETCH_TIMEOUT_MS: u32 = 30_000;

struct Runner {
    backend: Backend,
    text: Option<String>,
    session: Option<Session>,
    settings: Option<Settings>,
    running: bool,
    /// The last checkpoint taken on WebGPU, to continue on the CPU if the device is lost.
    snapshot: Option<Vec<u8>>,
    /// (time, step) when training last (re)started: steps/s and ETA are measured from it.
    clock: (f64, usize),
}

/// Tells the page which backend trains (its label and kind).
fn announce(backend: &Backend) {
    post(&Event::Backend {
        label: backend.label.clone(),
        kind: backend.kind,
    });
}

/// Why `Settings::skip_halted` is refused on WebGPU.
const SKIP_NEEDS_CPU: &str = "skipping halted tokens in training needs the CPU backend (it reads \
     the keep mask back inside each step, which WebGPU cannot do synchronously)";

fn fail(msg: impl Into<String>) {
    post(&Event::Error(Some(msg.into())));
}

/// Runs until the page goes away: waits for `Init`, then serves commands and trains.
pub async fn run(mut rx: UnboundedReceiver<Command>) {
    post(&Event::Status(Status::Loading));
    let (requested, corpus_url) = loop {
        match rx.next().await {
            Some(Command::Init {
                backend,
                corpus_url,
            }) => break (backend, corpus_url),
            Some(_) => continue,
            None => return,
        }
    };
    let mut runner = Runner::start(requested, &corpus_url).await;
    loop {
        while let Ok(cmd) = rx.try_recv() {
            runner.handle(cmd).await;
        }
        if runner.running {
            runner.train_step().await;
            js::sleep_ms(0).await;
        } else {
            match rx.next().await {
                Some(cmd) => runner.handle(cmd).await,
                None => return,
            }
        }
    }
}

impl Runner {
    async fn start(requested: Option<Kind>, corpus_url: &str) -> Self {
        let backend = match backend::init(requested).await {
            Ok(b) => b,
            Err(e) => {
                fail(format!("{e}; using the CPU backend"));
                backend::cpu("CPU (flex)".into())
            }
        };
        announce(&backend);
        let text = match js::fetch_bytes(corpus_url).await {
            Ok(bytes) => match String::from_utf8(bytes) {
                Ok(t) => {
                    post(&Event::Corpus(format!(
                        "Tiny-Shakespeare ({} characters)",
                        t.chars().count()
                    )));
                    Some(t)
                }
                Err(e) => {
                    post(&Event::Corpus("none: upload or paste a text".into()));
                    fail(format!(
                        "the bundled tinyshakespeare.txt is not UTF-8 ({e}); upload or paste a text"
                    ));
                    None
                }
            },
            Err(e) => {
                post(&Event::Corpus("none: upload or paste a text".into()));
                fail(format!(
                    "could not load Tiny-Shakespeare ({e}); upload or paste a text"
                ));
                None
            }
        };
        post(&Event::Status(Status::Idle));
        Self {
            backend,
            text,
            session: None,
            settings: None,
            running: false,
            snapshot: None,
            clock: (0.0, 0),
        }
    }

    fn set_running(&mut self, on: bool) {
        self.running = on;
        if on {
            self.clock = (
                js::now_ms(),
                self.session.as_ref().map_or(0, |s| s.step_count()),
            );
        }
        let done = self.session.as_ref().is_some_and(|s| s.done());
        post(&Event::Status(match (on, &self.session, done) {
            (true, _, _) => Status::Running,
            (false, None, _) => Status::Idle,
            (false, Some(_), true) => Status::Done,
            (false, Some(_), false) => Status::Paused,
        }));
    }

    async fn handle(&mut self, cmd: Command) {
        match cmd {
            Command::Init { .. } => {}
            Command::Start(settings) => self.start_training(settings).await,
            Command::Pause => self.set_running(false),
            Command::Resume if self.lost_device() => {}
            Command::Resume => match &self.session {
                Some(s) if !s.done() => {
                    post(&Event::Error(None));
                    self.set_running(true)
                }
                Some(_) => fail("training is finished; press Reset to start again"),
                None => fail("nothing to resume: press Start"),
            },
            Command::Reset => {
                post(&Event::Error(None));
                self.session = None;
                self.snapshot = None;
                self.new_run(0, 0, 0);
                self.set_running(false);
            }
            Command::Generate { sparse } => self.generate(sparse).await,
            Command::Download => self.download().await,
            Command::Upload { bytes, settings } => self.upload(bytes, settings).await,
            // Bounded: the worker serves no other command while it waits for the server.
            Command::OpenUrl { url, settings } => {
                match js::fetch_bytes_answered_within(&url, FETCH_TIMEOUT_MS).await {
                    Ok(bytes) => self.upload(bytes, settings).await,
                    Err(e) => fail(format!(
                        "could not fetch the model at {url} ({e}); the current model is kept"
                    )),
                }
            }
            Command::Corpus {
                name,
                bytes,
                context,
            } => self.set_corpus(name, bytes, context),
            Command::Backend(kind) => self.switch_backend(kind).await,
        }
    }

    fn new_run(&self, step: usize, total: usize, n_layers: usize) {
        post(&Event::NewRun {
            step,
            total,
            n_layers,
        });
    }

    async fn start_training(&mut self, settings: Settings) {
        let Some(text) = &self.text else {
            return fail("no training text yet: upload or paste one");
        };
        if settings.skip_halted && self.backend.kind == Kind::WebGpu {
            return fail(format!("cannot start: {SKIP_NEEDS_CPU}"));
        }
        match Session::new(&settings, text, &self.backend.device) {
            Ok(session) => {
                post(&Event::Error(None));
                self.new_run(0, session.total_steps(), session.config().n_layers);
                self.session = Some(session);
                self.settings = Some(settings);
                // The last run's: "Continue on the CPU" must not bring it back.
                self.snapshot = None;
                self.refresh_passage().await;
                self.set_running(true);
            }
            Err(e) => fail(format!("cannot start: {e}")),
        }
    }

    async fn train_step(&mut self) {
        if self.lost_device() {
            return;
        }
        let Some(session) = self.session.as_mut() else {
            return self.set_running(false);
        };
        let result = session.step().await;
        let (step, total) = (session.step_count(), session.total_steps());
        let eval_every = self.settings.as_ref().map_or(50, |s| s.eval_every);
        match result {
            Ok(stats) => {
                let elapsed = (js::now_ms() - self.clock.0) / 1000.0;
                let done = step - self.clock.1;
                let sps = (elapsed > 0.0 && done > 0).then(|| done as f64 / elapsed);
                post(&Event::Step(StepView {
                    step,
                    total,
                    loss: stats.task_loss,
                    alpha: stats.alpha,
                    steps_per_s: sps,
                    eta_s: sps.map(|s| (total - step) as f64 / s),
                }));
                // A model that cannot be evaluated (a device error, a failed read) stops
                // here: training on would only overwrite the message at every evaluation.
                let due = step % eval_every == 0 || step >= total || step == 1;
                if (due && !self.evaluate().await) || step >= total {
                    self.set_running(false);
                }
            }
            Err(e) => {
                self.set_running(false);
                if !self.lost_after_failure().await {
                    fail(format!("training paused: {e}"));
                }
            }
        }
    }

    /// A device lost mid-step surfaces first as a failed read (a staging buffer that cannot
    /// be mapped); the browser fires the lost callback some time later, so wait for it a
    /// little before calling the failure an ordinary error.
    async fn lost_after_failure(&mut self) -> bool {
        if self.backend.kind != Kind::WebGpu {
            return false;
        }
        for _ in 0..30 {
            if self.lost_device() {
                return true;
            }
            js::sleep_ms(100).await;
        }
        self.lost_device()
    }

    /// If the WebGPU device is gone: pause, say so, and offer to continue on the CPU.
    fn lost_device(&mut self) -> bool {
        let why = match self.backend.kind {
            Kind::WebGpu => backend::device_lost(),
            Kind::Cpu => None,
        };
        let Some(why) = why else { return false };
        self.set_running(false);
        post(&Event::OfferCpu(true));
        fail(format!(
            "the WebGPU device was lost ({why}). Continue on the CPU: training resumes from the \
             last evaluation's snapshot"
        ));
        true
    }

    /// Validation numbers and the passage's routing; the passage is posted first, so a page that
    /// sees the new validation loss already shows the routing that goes with it.
    /// False (the failure reported) if the model could not be evaluated.
    async fn evaluate(&mut self) -> bool {
        let Some(session) = &self.session else {
            return false;
        };
        match session.evaluate().await {
            Ok(numbers) => {
                self.publish(numbers).await;
                true
            }
            Err(e) => {
                if !self.lost_after_failure().await {
                    fail(format!("training paused: evaluation failed: {e}"));
                }
                false
            }
        }
    }

    /// Shows the current session's evaluation (and its passage), and on WebGPU keeps a snapshot
    /// of the model to continue from if the device is lost.
    async fn publish(&mut self, (stats, executed_loss): (EvalStats, Option<f64>)) {
        let Some(session) = &self.session else { return };
        let step = session.step_count();
        self.refresh_passage().await;
        post(&Event::Eval {
            step,
            stats,
            executed_loss,
        });
        if self.backend.kind == Kind::WebGpu
            && let Ok(bytes) = session.checkpoint().await
        {
            self.snapshot = Some(bytes);
        }
    }

    async fn refresh_passage(&self) {
        let Some(session) = &self.session else { return };
        match session.passage().await {
            Ok(tokens) => post(&Event::Passage(tokens)),
            Err(e) => fail(format!("routing view failed: {e}")),
        }
    }

    async fn generate(&mut self, sparse: bool) {
        let Some(session) = self.session.as_mut() else {
            return fail("train or upload a model first");
        };
        match session.generate(GENERATE_CHARS, sparse).await {
            Ok((tokens, alpha)) => post(&Event::Generation {
                tokens,
                sparse,
                alpha,
            }),
            Err(e) => {
                if !self.lost_after_failure().await {
                    fail(format!("generation failed: {e}"))
                }
            }
        }
    }

    async fn download(&mut self) {
        let Some(session) = &self.session else {
            return fail("no model to download yet");
        };
        match session.checkpoint().await {
            Ok(bytes) => post(&Event::Download {
                name: format!("tsa-step{}.tsa", session.step_count()),
                bytes,
            }),
            Err(e) => {
                if !self.lost_after_failure().await {
                    fail(format!("download failed: {e}"))
                }
            }
        }
    }

    async fn upload(&mut self, bytes: Vec<u8>, settings: Settings) {
        let Some(text) = &self.text else {
            return fail("load a training text before a checkpoint");
        };
        let train = match settings.train() {
            Ok(t) if t.skip_halted && self.backend.kind == Kind::WebGpu => {
                return fail(format!("checkpoint not loaded: {SKIP_NEEDS_CPU}"));
            }
            Ok(t) => t,
            Err(e) => return fail(format!("checkpoint not loaded: {e}")),
        };
        let loaded = Session::from_checkpoint(&bytes, text, train, &self.backend.device);
        let adopted = match loaded {
            Ok(session) => self.adopt(session, settings, false).await,
            Err(e) => Err(e),
        };
        if let Err(e) = adopted {
            fail(format!(
                "checkpoint not loaded ({e}); the current model is kept"
            ));
        }
    }

    /// Makes `session` current (after an upload or a backend switch) and shows its state — once
    /// it has evaluated: a model that cannot (non-finite weights, a device error) is refused and
    /// the current one kept. `continued`: the same run on another device, so the charts keep
    /// their history up to its step.
    async fn adopt(
        &mut self,
        session: Session,
        settings: Settings,
        continued: bool,
    ) -> Result<(), String> {
        let numbers = match session.evaluate().await {
            Ok(numbers) => numbers,
            // Only a device error is worth waiting for the lost callback (see
            // `lost_after_failure`); the offer to continue on the CPU then stays up.
            Err(e) if self.lost_after_failure().await => {
                return Err(format!("the WebGPU device was lost: {e}"));
            }
            Err(e) => return Err(e),
        };
        if let Some(bad) = [Some(numbers.0.loss), numbers.1]
            .into_iter()
            .flatten()
            .find(|l| !l.is_finite())
        {
            return Err(format!("its validation loss is {bad}"));
        }
        self.set_running(false);
        post(&Event::Error(None));
        let (step, total) = (session.step_count(), session.total_steps());
        match continued {
            true => post(&Event::Continued { step, total }),
            false => {
                self.new_run(step, total, session.config().n_layers);
                post(&Event::Loaded(session.config().clone()));
            }
        }
        self.session = Some(session);
        self.settings = Some(settings);
        self.snapshot = None;
        self.publish(numbers).await;
        self.set_running(false);
        Ok(())
    }

    fn set_corpus(&mut self, name: String, bytes: Vec<u8>, context: usize) {
        match tsa_core::data::Corpus::from_bytes(&bytes, context) {
            Ok(corpus) => {
                // Valid UTF-8 (checked by from_bytes).
                self.text = String::from_utf8(bytes).ok();
                post(&Event::Error(None));
                post(&Event::Corpus(format!(
                    "{name} ({} characters, {} distinct): used from the next Start",
                    corpus.len(),
                    corpus.tokenizer.vocab_size()
                )));
            }
            Err(e) => fail(format!("text not used ({e}); the previous text is kept")),
        }
    }

    async fn switch_backend(&mut self, kind: Kind) {
        if kind == self.backend.kind {
            return;
        }
        let gone = backend::device_lost().is_some();
        // The model is on the lost device: only its snapshot can move.
        let lost = gone && self.backend.kind == Kind::WebGpu;
        let next = match kind {
            Kind::Cpu => backend::cpu("CPU (flex)".into()),
            // A device lost earlier: the cached one is dead, and a page gets one adapter's device.
            Kind::WebGpu if gone => {
                return fail("the WebGPU device was lost; reload the page to try it again");
            }
            Kind::WebGpu => match backend::init(Some(Kind::WebGpu)).await {
                Ok(b) => b,
                Err(e) => return fail(e),
            },
        };
        let Some(session) = &self.session else {
            return self.use_backend(next);
        };
        // Carry the model over as a checkpoint (Adam's moments restart).
        let bytes = match lost {
            true => self.snapshot.clone(),
            false => match session.checkpoint().await {
                Ok(b) => Some(b),
                Err(e) => return fail(format!("could not move the model: {e}")),
            },
        };
        let (Some(bytes), Some(settings)) = (bytes, self.settings.clone()) else {
            // Lost before its first evaluation took a snapshot: nothing to carry over.
            self.session = None;
            self.new_run(0, 0, 0);
            self.use_backend(next);
            return fail(
                "the WebGPU device was lost before the run's first evaluation, so no model was \
                 kept: press Start to train on the CPU",
            );
        };
        let mut train = session.trainer.config.clone();
        // CPU-only (see `start_training`): on WebGPU the run goes on masking halted tokens.
        let masked = train.skip_halted && kind == Kind::WebGpu;
        train.skip_halted &= !masked;
        // The run's own corpus, on the new device; the backend goes back if it does not evaluate.
        let moved = session.moved(&bytes, train, &next.device);
        let previous = std::mem::replace(&mut self.backend, next);
        let adopted = match moved {
            Ok(session) => self.adopt(session, settings, true).await,
            Err(e) => Err(e),
        };
        if let Err(e) = adopted {
            self.backend = previous;
            return fail(format!("could not move the model: {e}"));
        }
        announce(&self.backend);
        post(&Event::OfferCpu(false));
        if masked {
            fail(
                "on WebGPU halted tokens compute their FFN in training again (skipping is CPU-only)",
            );
        }
    }

    /// Trains on `next` from now on (no model to carry over).
    fn use_backend(&mut self, next: Backend) {
        self.backend = next;
        announce(&self.backend);
        post(&Event::OfferCpu(false));
        self.set_running(false);
    }
}
