//! Live numbers (progress, losses, soft and executed α, TLOps saved) and the training curves.

use leptos::prelude::*;
use tsa_core::metrics::tlops_saved;

use super::Ctx;
use super::chart::{LineChart, Series};

pub fn fmt(v: Option<f64>, digits: usize) -> String {
    v.map_or("–".into(), |v| format!("{v:.digits$}"))
}

fn eta(s: Option<f64>) -> String {
    match s {
        Some(s) if s.is_finite() && s >= 60.0 => {
            format!("{:.0} min {:.0} s", (s / 60.0).floor(), s % 60.0)
        }
        Some(s) if s.is_finite() => format!("{s:.0} s"),
        _ => "–".into(),
    }
}

#[component]
pub fn Stats() -> impl IntoView {
    let ctx = Ctx::use_context();
    let (run, shell) = (ctx.state.run, ctx.state.shell);
    let progress = move || {
        run.with(|r| match r.total {
            0 => 0.0,
            t => r.step as f64 / t as f64,
        })
    };
    let eval = move |f: fn(&tsa_core::EvalStats) -> f64| run.with(|r| r.eval.as_ref().map(f));
    let tlops = move || {
        run.with(|r| {
            r.eval
                .as_ref()
                .map(|e| e.tlops_saved)
                .or_else(|| r.alpha().map(|a| tlops_saved(a, r.n_layers)))
        })
    };
    let curve = move |f: fn(&super::RunView) -> &Vec<(f64, f64)>| {
        Signal::derive(move || run.with(|r| f(r).clone()))
    };
    view! {
        <section class="stats">
            <div class="progress">
                <span data-testid="step">{move || run.with(|r| format!("{} / {}", r.step, r.total))}</span>
                <progress max="1" value=move || progress().to_string()></progress>
                <span>{move || format!("{} steps/s", fmt(run.with(|r| r.last.and_then(|s| s.steps_per_s)), 2))}</span>
                <span>{move || format!("ETA {}", eta(run.with(|r| r.last.and_then(|s| s.eta_s))))}</span>
                <span class="muted" data-testid="status">
                    {move || format!("{:?}", shell.with(|s| s.status)).to_lowercase()}
                </span>
            </div>
            <dl>
                <dt>"train loss"</dt>
                <dd data-testid="loss">{move || fmt(run.with(|r| r.last.map(|s| s.loss as f64)), 4)}</dd>
                <dt>"val loss"</dt>
                <dd data-testid="val-loss">{move || fmt(eval(|e| e.loss), 4)}</dd>
                <dt>"val loss, executed (p > 0.5 skips)"</dt>
                <dd data-testid="executed-val-loss">{move || fmt(run.with(|r| r.executed_loss), 4)}</dd>
                <dt>"val BPC"</dt>
                <dd>{move || fmt(eval(|e| e.bpc), 3)}</dd>
                <dt>"soft α (mean 1 − p)"</dt>
                <dd data-testid="alpha">{move || fmt(run.with(|r| r.alpha()), 3)}</dd>
                <dt>"soft TLOps saved"</dt>
                <dd data-testid="tlops">{move || fmt(tlops().map(|t| 100.0 * t), 1)}"%"</dd>
                <dt>"executed α (p ≤ 0.5 runs)"</dt>
                <dd data-testid="executed-alpha">{move || fmt(eval(|e| e.executed_alpha), 3)}</dd>
                <dt>"executed TLOps saved"</dt>
                <dd data-testid="executed-tlops">{move || fmt(eval(|e| 100.0 * e.executed_tlops_saved), 1)}"%"</dd>
            </dl>
            <div class="charts">
                <LineChart
                    title="loss (nats)"
                    series=vec![
                        Series { name: "train", color: "#4472c4", points: Signal::derive(move || run.with(|r| r.train_curve.points())) },
                        Series { name: "val", color: "#d6561c", points: curve(|r| &r.val_curve) },
                        Series { name: "val, executed", color: "#7f7f7f", points: curve(|r| &r.executed_val_curve) },
                    ]
                />
                <LineChart
                    title="α (val)"
                    series=vec![
                        Series { name: "soft", color: "#2e8b57", points: curve(|r| &r.alpha_curve) },
                        Series { name: "executed", color: "#8a4fbf", points: curve(|r| &r.executed_curve) },
                    ]
                />
            </div>
        </section>
    }
}
