//! What the page shows, as two values: the app's shell (backend, status, messages) and the current
//! run's view, which a new run (start, reset, upload) replaces whole. Only [`apply`] writes them,
//! from the worker's events.

use leptos::prelude::*;
use tsa_core::EvalStats;

use crate::protocol::{Event, Kind, Status, StepView, TokenView};

#[derive(Debug, Clone, PartialEq)]
pub struct Shell {
    pub backend: String,
    pub backend_kind: Option<Kind>,
    pub status: Status,
    pub corpus: String,
    pub error: Option<String>,
    /// The WebGPU device was lost: offer to continue on the CPU.
    pub offer_cpu: bool,
}

impl Default for Shell {
    fn default() -> Self {
        Self {
            backend: "detecting…".into(),
            backend_kind: None,
            status: Status::Loading,
            corpus: "loading Tiny-Shakespeare…".into(),
            error: None,
            offer_cpu: false,
        }
    }
}

/// A generated text and how it was run.
#[derive(Debug, Clone, PartialEq)]
pub struct GenerationView {
    pub tokens: Vec<TokenView>,
    pub sparse: bool,
    pub alpha: f64,
}

/// One training run as the page sees it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RunView {
    pub step: usize,
    pub total: usize,
    pub n_layers: usize,
    pub last: Option<StepView>,
    pub eval: Option<EvalStats>,
    /// The last evaluation's validation loss with the inference rule executed.
    pub executed_loss: Option<f64>,
    pub train_curve: Vec<(f64, f64)>,
    pub val_curve: Vec<(f64, f64)>,
    pub executed_val_curve: Vec<(f64, f64)>,
    pub alpha_curve: Vec<(f64, f64)>,
    pub executed_curve: Vec<(f64, f64)>,
    pub passage: Vec<TokenView>,
    pub generation: Option<GenerationView>,
}

impl RunView {
    /// Soft α: the last training step's, else the last evaluation's (a model just loaded).
    pub fn alpha(&self) -> Option<f64> {
        self.last
            .map(|s| s.alpha as f64)
            .or_else(|| self.eval.as_ref().map(|e| e.alpha))
    }
}

/// The page's state: the app's shell, the current run, and the form.
#[derive(Clone, Copy)]
pub struct State {
    pub shell: RwSignal<Shell>,
    pub run: RwSignal<RunView>,
}

impl State {
    pub fn new() -> Self {
        Self {
            shell: RwSignal::new(Shell::default()),
            run: RwSignal::new(RunView::default()),
        }
    }

    pub fn fail(&self, msg: impl Into<String>) {
        let msg = msg.into();
        self.shell.update(|s| s.error = Some(msg));
    }

    /// Folds one worker event into the view. Downloads and crashes are handled by the caller.
    pub fn apply(&self, event: Event) {
        match event {
            Event::Backend { label, kind } => self.shell.update(|s| {
                s.backend = label;
                s.backend_kind = Some(kind);
            }),
            Event::Status(status) => self.shell.update(|s| s.status = status),
            Event::Corpus(text) => self.shell.update(|s| s.corpus = text),
            Event::Error(error) => self.shell.update(|s| s.error = error),
            Event::OfferCpu(on) => self.shell.update(|s| s.offer_cpu = on),
            Event::NewRun {
                step,
                total,
                n_layers,
            } => self.run.set(RunView {
                step,
                total,
                n_layers,
                ..RunView::default()
            }),
            Event::Step(s) => self.run.update(|r| {
                r.step = s.step;
                r.total = s.total;
                r.train_curve.push((s.step as f64, s.loss as f64));
                r.last = Some(s);
            }),
            Event::Eval {
                step,
                stats,
                executed_loss,
            } => self.run.update(|r| {
                let x = step as f64;
                r.val_curve.push((x, stats.loss));
                if let Some(l) = executed_loss {
                    r.executed_val_curve.push((x, l));
                }
                r.executed_loss = executed_loss;
                r.alpha_curve.push((x, stats.alpha));
                r.executed_curve.push((x, stats.executed_alpha));
                r.eval = Some(stats);
            }),
            Event::Passage(tokens) => self.run.update(|r| r.passage = tokens),
            Event::Generation {
                tokens,
                sparse,
                alpha,
            } => self.run.update(|r| {
                r.generation = Some(GenerationView {
                    tokens,
                    sparse,
                    alpha,
                })
            }),
            Event::Ready | Event::Download { .. } | Event::Crashed(_) => {}
        }
    }
}

impl Default for State {
    fn default() -> Self {
        Self::new()
    }
}
