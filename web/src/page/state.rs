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
    pub train_curve: Thinned,
    pub val_curve: Vec<(f64, f64)>,
    pub executed_val_curve: Vec<(f64, f64)>,
    pub alpha_curve: Vec<(f64, f64)>,
    pub executed_curve: Vec<(f64, f64)>,
    pub passage: Vec<TokenView>,
    pub generation: Option<GenerationView>,
}

impl RunView {
    /// The same run resumed at `step` (on another device): what came after it is dropped, so the
    /// curves go on from there. The evaluation at `step` goes too: the worker sends it again,
    /// measured on the new device.
    fn continue_at(&mut self, step: usize, total: usize) {
        let x = step as f64;
        self.train_curve.cut_after(x);
        for curve in [
            &mut self.val_curve,
            &mut self.executed_val_curve,
            &mut self.alpha_curve,
            &mut self.executed_curve,
        ] {
            curve.retain(|&(at, _)| at < x);
        }
        self.step = step;
        self.total = total;
        // Its rate and ETA were the old device's.
        self.last = None;
    }

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
            Event::Continued { step, total } => self.run.update(|r| r.continue_at(step, total)),
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
            // The caller's: the form, a file to save, a banner.
            Event::Ready | Event::Loaded(_) | Event::Download { .. } | Event::Crashed(_) => {}
        }
    }
}

/// Points a training curve keeps at most: a chart is 320 pixels wide and is redrawn at every
/// step, so a long run's curve is thinned instead of growing without bound.
pub const CURVE_POINTS: usize = 1024;

/// A curve of one point per step, kept as means over buckets of `stride` steps; when it reaches
/// [`CURVE_POINTS`], neighbouring buckets merge and the stride doubles (every bucket as wide).
#[derive(Debug, Clone, PartialEq)]
pub struct Thinned {
    points: Vec<(f64, f64)>,
    /// Steps per point (1 until the first merge).
    stride: usize,
    /// The newest steps, not yet a whole bucket.
    pending: Vec<(f64, f64)>,
}

fn mean(points: &[(f64, f64)]) -> (f64, f64) {
    let n = points.len() as f64;
    let sum = points
        .iter()
        .fold((0.0, 0.0), |a, p| (a.0 + p.0, a.1 + p.1));
    (sum.0 / n, sum.1 / n)
}

impl Default for Thinned {
    fn default() -> Self {
        Self {
            points: Vec::new(),
            stride: 1,
            pending: Vec::new(),
        }
    }
}

impl Thinned {
    pub fn push(&mut self, point: (f64, f64)) {
        self.pending.push(point);
        if self.pending.len() >= self.stride {
            self.points.push(mean(&self.pending));
            self.pending.clear();
        }
        if self.points.len() >= CURVE_POINTS {
            self.points = self.points.chunks(2).map(mean).collect();
            self.stride *= 2;
        }
    }

    /// What the chart draws: the buckets, then the mean of the steps not yet one.
    pub fn points(&self) -> Vec<(f64, f64)> {
        let mut all = self.points.clone();
        if !self.pending.is_empty() {
            all.push(mean(&self.pending));
        }
        all
    }

    /// Drops what came after step `x`.
    fn cut_after(&mut self, x: f64) {
        self.points.retain(|p| p.0 <= x);
        self.pending.retain(|p| p.0 <= x);
    }
}

impl Default for State {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasm_bindgen_test::wasm_bindgen_test;

    #[wasm_bindgen_test]
    fn a_long_curve_is_thinned_into_even_buckets_keeping_its_span_and_level() {
        let mut curve = Thinned::default();
        for step in 1..=10_000 {
            curve.push((step as f64, 2.0 + (step % 2) as f64));
        }
        let points = curve.points();
        assert!(points.len() <= CURVE_POINTS, "{}", points.len());
        assert!(points.len() > CURVE_POINTS / 4, "{}", points.len());
        let gaps: Vec<f64> = points.windows(2).map(|w| w[1].0 - w[0].0).collect();
        assert!(gaps.iter().all(|&g| g > 0.0), "steps stay in order");
        // Every whole bucket is as wide (16 steps here); only the unfinished last one differs.
        let whole = &gaps[..gaps.len() - 1];
        assert!(whole.iter().all(|&g| g == whole[0]), "{:?}", &whole[..4]);
        let (first, last) = (points[0].0, points[points.len() - 1].0);
        assert!(first < 20.0 && last > 9_990.0, "{first} … {last}");
        // Buckets of an even number of steps average the alternating 2 and 3.
        assert!((points[0].1 - 2.5).abs() < 1e-9, "{}", points[0].1);
        // Short curves are drawn as they are.
        let mut short = Thinned::default();
        (1..=5).for_each(|s| short.push((s as f64, s as f64)));
        assert_eq!(short.points().len(), 5);
    }

    #[wasm_bindgen_test]
    fn a_run_continued_on_another_device_keeps_its_history_up_to_its_step() {
        let state = State::new();
        state.apply(Event::NewRun {
            step: 0,
            total: 300,
            n_layers: 4,
        });
        state.run.update(|r| {
            (1..=120).for_each(|step| r.train_curve.push((step as f64, 3.0)));
            r.val_curve = vec![(50.0, 2.5), (100.0, 2.2)];
            r.alpha_curve = vec![(50.0, 0.7), (100.0, 0.6)];
            r.step = 120;
        });
        // The snapshot was taken at the evaluation of step 100.
        state.apply(Event::Continued {
            step: 100,
            total: 300,
        });
        state.run.with(|r| {
            assert_eq!(r.step, 100);
            assert_eq!(r.train_curve.points().len(), 100);
            // Step 100's evaluation follows from the new device.
            assert_eq!(r.val_curve, vec![(50.0, 2.5)]);
            assert_eq!(r.alpha_curve.len(), 1);
            assert!(r.last.is_none());
        });
    }
}
