//! The one task that owns the model. The UI sends it commands; between commands it trains, one
//! step at a time, yielding to the browser after each so the page stays responsive.

use futures::StreamExt;
use futures::channel::mpsc::{UnboundedReceiver, UnboundedSender, unbounded};
use leptos::prelude::*;
use tsa_core::EvalStats;

use crate::backend::{self, Backend, Kind};
use crate::files;
use crate::session::{Session, TokenView};
use crate::settings::Settings;

/// Characters written by Generate.
const GENERATE_CHARS: usize = 200;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Loading,
    Idle,
    Running,
    Paused,
    Done,
}

pub enum Command {
    Start(Settings),
    Pause,
    Resume,
    Reset,
    Generate,
    Download,
    Upload(Vec<u8>, Settings),
    /// Fetch a checkpoint from a URL, then as `Upload`.
    OpenUrl(String, Settings),
    Corpus {
        name: String,
        bytes: Vec<u8>,
        context: usize,
    },
    Backend(Kind),
}

/// Everything the page shows; written by the runner only.
#[derive(Clone, Copy)]
pub struct Ui {
    pub backend: RwSignal<String>,
    pub backend_kind: RwSignal<Option<Kind>>,
    pub status: RwSignal<Status>,
    /// (done, total)
    pub step: RwSignal<(usize, usize)>,
    pub steps_per_s: RwSignal<Option<f64>>,
    pub eta_s: RwSignal<Option<f64>>,
    pub loss: RwSignal<Option<f32>>,
    pub alpha: RwSignal<Option<f64>>,
    pub n_layers: RwSignal<usize>,
    pub eval: RwSignal<Option<EvalStats>>,
    pub train_curve: RwSignal<Vec<(f64, f64)>>,
    pub val_curve: RwSignal<Vec<(f64, f64)>>,
    pub alpha_curve: RwSignal<Vec<(f64, f64)>>,
    pub passage: RwSignal<Vec<TokenView>>,
    pub generation: RwSignal<Vec<TokenView>>,
    pub corpus: RwSignal<String>,
    pub error: RwSignal<Option<String>>,
    /// The WebGPU device was lost: offer to continue on the CPU.
    pub offer_cpu: RwSignal<bool>,
}

impl Ui {
    pub fn new() -> Self {
        Self {
            backend: RwSignal::new("detecting…".into()),
            backend_kind: RwSignal::new(None),
            status: RwSignal::new(Status::Loading),
            step: RwSignal::new((0, 0)),
            steps_per_s: RwSignal::new(None),
            eta_s: RwSignal::new(None),
            loss: RwSignal::new(None),
            alpha: RwSignal::new(None),
            n_layers: RwSignal::new(0),
            eval: RwSignal::new(None),
            train_curve: RwSignal::new(Vec::new()),
            val_curve: RwSignal::new(Vec::new()),
            alpha_curve: RwSignal::new(Vec::new()),
            passage: RwSignal::new(Vec::new()),
            generation: RwSignal::new(Vec::new()),
            corpus: RwSignal::new("loading Tiny-Shakespeare…".into()),
            error: RwSignal::new(None),
            offer_cpu: RwSignal::new(false),
        }
    }

    fn fail(&self, msg: impl Into<String>) {
        self.error.set(Some(msg.into()));
    }
}

impl Default for Ui {
    fn default() -> Self {
        Self::new()
    }
}

struct Runner {
    ui: Ui,
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

/// Starts the runner; the returned sender is how the UI talks to it.
pub fn spawn(ui: Ui) -> UnboundedSender<Command> {
    let (tx, rx) = unbounded();
    leptos::task::spawn_local(async move {
        let runner = Runner::start(ui).await;
        runner.run(rx).await;
    });
    tx
}

impl Runner {
    async fn start(ui: Ui) -> Self {
        let requested = files::query("backend").and_then(|s| Kind::parse(&s));
        let backend = match backend::init(requested).await {
            Ok(b) => b,
            Err(e) => {
                ui.fail(format!("{e}; using the CPU backend"));
                backend::cpu("CPU (flex)".into())
            }
        };
        ui.backend.set(backend.label.clone());
        ui.backend_kind.set(Some(backend.kind));
        let text = match files::fetch_bytes("tinyshakespeare.txt").await {
            Ok(bytes) => match String::from_utf8(bytes) {
                Ok(t) => {
                    ui.corpus.set(format!(
                        "Tiny-Shakespeare ({} characters)",
                        t.chars().count()
                    ));
                    Some(t)
                }
                Err(e) => {
                    ui.corpus.set("none: upload or paste a text".into());
                    ui.fail(format!(
                        "the bundled tinyshakespeare.txt is not UTF-8 ({e}); upload or paste a text"
                    ));
                    None
                }
            },
            Err(e) => {
                ui.corpus.set("none: upload or paste a text".into());
                ui.fail(format!(
                    "could not load Tiny-Shakespeare ({e}); upload or paste a text"
                ));
                None
            }
        };
        ui.status.set(Status::Idle);
        Self {
            ui,
            backend,
            text,
            session: None,
            settings: None,
            running: false,
            snapshot: None,
            clock: (0.0, 0),
        }
    }

    async fn run(mut self, mut rx: UnboundedReceiver<Command>) {
        loop {
            while let Ok(cmd) = rx.try_recv() {
                self.handle(cmd).await;
            }
            if self.running {
                self.train_step().await;
                files::yield_now().await;
            } else {
                match rx.next().await {
                    Some(cmd) => self.handle(cmd).await,
                    None => return,
                }
            }
        }
    }

    fn set_running(&mut self, on: bool) {
        self.running = on;
        if on {
            self.clock = (
                files::now_ms(),
                self.session.as_ref().map_or(0, |s| s.step_count()),
            );
        }
        let done = self.session.as_ref().is_some_and(|s| s.done());
        self.ui.status.set(match (on, &self.session, done) {
            (true, _, _) => Status::Running,
            (false, None, _) => Status::Idle,
            (false, Some(_), true) => Status::Done,
            (false, Some(_), false) => Status::Paused,
        });
    }

    async fn handle(&mut self, cmd: Command) {
        match cmd {
            Command::Start(settings) => self.start_training(settings).await,
            Command::Pause => self.set_running(false),
            Command::Resume => match &self.session {
                Some(s) if !s.done() => {
                    self.ui.error.set(None);
                    self.set_running(true)
                }
                Some(_) => self
                    .ui
                    .fail("training is finished; press Reset to start again"),
                None => self.ui.fail("nothing to resume: press Start"),
            },
            Command::Reset => {
                self.session = None;
                self.snapshot = None;
                self.clear_views();
                self.set_running(false);
            }
            Command::Generate => self.generate().await,
            Command::Download => self.download().await,
            Command::Upload(bytes, settings) => self.upload(bytes, settings).await,
            Command::OpenUrl(url, settings) => match files::fetch_bytes(&url).await {
                Ok(bytes) => self.upload(bytes, settings).await,
                Err(e) => self.ui.fail(format!(
                    "could not fetch the model at {url} ({e}); the current model is kept"
                )),
            },
            Command::Corpus {
                name,
                bytes,
                context,
            } => self.set_corpus(name, bytes, context),
            Command::Backend(kind) => self.switch_backend(kind).await,
        }
    }

    fn clear_views(&self) {
        let ui = self.ui;
        ui.step.set((0, 0));
        ui.steps_per_s.set(None);
        ui.eta_s.set(None);
        ui.loss.set(None);
        ui.alpha.set(None);
        ui.eval.set(None);
        ui.train_curve.set(Vec::new());
        ui.val_curve.set(Vec::new());
        ui.alpha_curve.set(Vec::new());
        ui.passage.set(Vec::new());
        ui.generation.set(Vec::new());
    }

    async fn start_training(&mut self, settings: Settings) {
        let Some(text) = &self.text else {
            return self.ui.fail("no training text yet: upload or paste one");
        };
        match Session::new(&settings, text, &self.backend.device) {
            Ok(session) => {
                self.ui.error.set(None);
                self.clear_views();
                self.ui.step.set((0, session.total_steps()));
                self.ui.n_layers.set(session.config().n_layers);
                self.session = Some(session);
                self.settings = Some(settings);
                self.refresh_passage().await;
                self.set_running(true);
            }
            Err(e) => self.ui.fail(format!("cannot start: {e}")),
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
                let ui = self.ui;
                ui.step.set((step, total));
                ui.loss.set(Some(stats.task_loss));
                ui.alpha.set(Some(stats.alpha as f64));
                ui.train_curve
                    .update(|c| c.push((step as f64, stats.task_loss as f64)));
                let elapsed = (files::now_ms() - self.clock.0) / 1000.0;
                let done = step - self.clock.1;
                if elapsed > 0.0 && done > 0 {
                    let sps = done as f64 / elapsed;
                    ui.steps_per_s.set(Some(sps));
                    ui.eta_s.set(Some((total - step) as f64 / sps));
                }
                if step % eval_every == 0 || step >= total || step == 1 {
                    self.evaluate().await;
                }
                if step >= total {
                    self.set_running(false);
                }
            }
            Err(e) => {
                self.set_running(false);
                if !self.lost_after_failure().await {
                    self.ui.fail(format!("training paused: {e}"));
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
            files::sleep_ms(100).await;
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
        self.ui.offer_cpu.set(true);
        self.ui.fail(format!(
            "the WebGPU device was lost ({why}). Continue on the CPU: training resumes from the \
             last evaluation's snapshot"
        ));
        true
    }

    async fn evaluate(&mut self) {
        let Some(session) = &self.session else { return };
        let step = session.step_count() as f64;
        match session.evaluate().await {
            Ok(stats) => {
                self.ui.val_curve.update(|c| c.push((step, stats.loss)));
                self.ui.alpha_curve.update(|c| c.push((step, stats.alpha)));
                self.ui.eval.set(Some(stats));
            }
            Err(e) => {
                if !self.lost_after_failure().await {
                    self.ui.fail(format!("evaluation failed: {e}"));
                }
                return;
            }
        }
        self.refresh_passage().await;
        if self.backend.kind == Kind::WebGpu
            && let Some(session) = &self.session
            && let Ok(bytes) = session.checkpoint().await
        {
            self.snapshot = Some(bytes);
        }
    }

    async fn refresh_passage(&self) {
        let Some(session) = &self.session else { return };
        match session.passage().await {
            Ok(tokens) => self.ui.passage.set(tokens),
            Err(e) => self.ui.fail(format!("routing view failed: {e}")),
        }
    }

    async fn generate(&mut self) {
        let Some(session) = self.session.as_mut() else {
            return self.ui.fail("train or upload a model first");
        };
        match session.generate(GENERATE_CHARS).await {
            Ok(tokens) => self.ui.generation.set(tokens),
            Err(e) => self.ui.fail(format!("generation failed: {e}")),
        }
    }

    async fn download(&self) {
        let Some(session) = &self.session else {
            return self.ui.fail("no model to download yet");
        };
        let result = match session.checkpoint().await {
            Ok(bytes) => files::download(&bytes, &format!("tsa-step{}.tsa", session.step_count())),
            Err(e) => Err(e),
        };
        if let Err(e) = result {
            self.ui.fail(format!("download failed: {e}"));
        }
    }

    async fn upload(&mut self, bytes: Vec<u8>, settings: Settings) {
        let Some(text) = &self.text else {
            return self.ui.fail("load a training text before a checkpoint");
        };
        let train = match settings.train() {
            Ok(t) => t,
            Err(e) => return self.ui.fail(format!("checkpoint not loaded: {e}")),
        };
        match Session::from_checkpoint(&bytes, text, train, &self.backend.device) {
            Ok(session) => self.adopt(session, settings).await,
            Err(e) => self.ui.fail(format!(
                "checkpoint not loaded ({e}); the current model is kept"
            )),
        }
    }

    /// Makes `session` current (after an upload or a backend switch) and shows its state.
    async fn adopt(&mut self, session: Session, settings: Settings) {
        self.set_running(false);
        self.ui.error.set(None);
        self.clear_views();
        self.ui
            .step
            .set((session.step_count(), session.total_steps()));
        self.ui.n_layers.set(session.config().n_layers);
        self.session = Some(session);
        self.settings = Some(settings);
        self.evaluate().await;
        if let Some(stats) = self.ui.eval.get_untracked() {
            self.ui.alpha.set(Some(stats.alpha));
        }
        self.set_running(false);
    }

    fn set_corpus(&mut self, name: String, bytes: Vec<u8>, context: usize) {
        match tsa_core::data::Corpus::from_bytes(&bytes, context) {
            Ok(corpus) => {
                // Valid UTF-8 (checked by from_bytes).
                self.text = String::from_utf8(bytes).ok();
                self.ui.error.set(None);
                self.ui.corpus.set(format!(
                    "{name} ({} characters, {} distinct): used from the next Start",
                    corpus.len(),
                    corpus.tokenizer.vocab_size()
                ));
            }
            Err(e) => self
                .ui
                .fail(format!("text not used ({e}); the previous text is kept")),
        }
    }

    async fn switch_backend(&mut self, kind: Kind) {
        if kind == self.backend.kind {
            return;
        }
        let lost = backend::device_lost().is_some() && self.backend.kind == Kind::WebGpu;
        let next = match kind {
            Kind::Cpu => backend::cpu("CPU (flex)".into()),
            Kind::WebGpu if lost => {
                return self
                    .ui
                    .fail("the WebGPU device was lost; reload the page to try it again");
            }
            Kind::WebGpu => match backend::init(Some(Kind::WebGpu)).await {
                Ok(b) => b,
                Err(e) => return self.ui.fail(e),
            },
        };
        // Carry the model over as a checkpoint (Adam's moments restart).
        let bytes = match (&self.session, lost) {
            (None, _) => None,
            (Some(_), true) => self.snapshot.clone(),
            (Some(s), false) => match s.checkpoint().await {
                Ok(b) => Some(b),
                Err(e) => return self.ui.fail(format!("could not move the model: {e}")),
            },
        };
        self.backend = next;
        self.ui.backend.set(self.backend.label.clone());
        self.ui.backend_kind.set(Some(self.backend.kind));
        self.ui.offer_cpu.set(false);
        let (Some(bytes), Some(text), Some(settings)) = (bytes, &self.text, self.settings.clone())
        else {
            self.session = None;
            self.clear_views();
            return self.set_running(false);
        };
        let train = self.session.as_ref().map(|s| s.trainer.config.clone());
        let Some(train) = train else { return };
        match Session::from_checkpoint(&bytes, text, train, &self.backend.device) {
            Ok(session) => self.adopt(session, settings).await,
            Err(e) => self.ui.fail(format!("could not move the model: {e}")),
        }
    }
}
