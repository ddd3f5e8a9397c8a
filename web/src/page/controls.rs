//! The form (preset, model, shape and schedule), the run buttons, and the backend choice.

use leptos::prelude::*;

use super::Ctx;
use crate::protocol::{Command, Kind, Status};
use crate::settings::{Preset, Settings};
use tsa_core::TsaGate;

fn parse<T: std::str::FromStr>(s: &str) -> Result<T, String> {
    s.trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a valid number"))
}

/// An empty field means no compute target.
fn parse_target(s: &str) -> Result<Option<f64>, String> {
    match s.trim() {
        "" => Ok(None),
        v => parse(v).map(Some),
    }
}

/// The model select's values for TSA's gates.
const GATES: [(&str, TsaGate); 4] = [
    ("soft", TsaGate::Soft),
    ("st-scaled", TsaGate::StraightThroughScaled),
    ("st", TsaGate::StraightThrough),
    ("gumbel", TsaGate::Gumbel),
];

fn gate_of(value: &str) -> Option<TsaGate> {
    GATES.iter().find(|(v, _)| *v == value).map(|&(_, g)| g)
}

fn gate_value(gate: TsaGate) -> &'static str {
    GATES
        .iter()
        .find(|(_, g)| *g == gate)
        .map_or("soft", |&(v, _)| v)
}

/// Whether the chosen model's training gate halts tokens outright (so they can skip work).
fn halts_outright(s: &Settings) -> bool {
    s.routing().gates_hard_in_training()
}

#[component]
pub fn BackendSelect() -> impl IntoView {
    let ctx = Ctx::use_context();
    let shell = ctx.state.shell;
    view! {
        <p>
            "Backend: " <strong data-testid="backend">{move || shell.with(|s| s.backend.clone())}</strong> " "
            <select
                aria-label="backend"
                disabled=ctx.busy()
                on:change=move |ev| {
                    if let Some(k) = Kind::parse(&event_target_value(&ev)) {
                        ctx.send(Command::Backend(k));
                    }
                }
                prop:value=move || shell.with(|s| s.backend_kind.map_or("", |k| k.name()))
            >
                <option value="webgpu">"WebGPU"</option>
                <option value="cpu">"CPU (flex)"</option>
            </select>
        </p>
    }
}

/// A labelled text field bound to one setting; a value that does not parse is a message.
#[component]
fn Field(
    label: &'static str,
    get: fn(&Settings) -> String,
    set: fn(&mut Settings, &str) -> Result<(), String>,
) -> impl IntoView {
    let ctx = Ctx::use_context();
    let settings = ctx.settings;
    view! {
        <label class="field">
            <span>{label}</span>
            <input
                type="text"
                inputmode="decimal"
                prop:value=move || settings.with(get)
                disabled=ctx.busy()
                on:change=move |ev| {
                    let mut next = settings.get_untracked();
                    match set(&mut next, &event_target_value(&ev)) {
                        Ok(()) => settings.set(next),
                        Err(e) => {
                            ctx.state.fail(format!("{label}: {e}"));
                            // Show the value in use again, not the text that was refused.
                            settings.update(|_| {});
                        }
                    }
                }
            />
        </label>
    }
}

#[component]
pub fn Controls() -> impl IntoView {
    let ctx = Ctx::use_context();
    let (settings, shell, busy) = (ctx.settings, ctx.state.shell, ctx.busy());
    let status = move || shell.with(|s| s.status);
    view! {
        <section class="controls">
            <label class="field">
                <span>"preset"</span>
                <select
                    data-testid="preset"
                    disabled=busy
                    on:change=move |ev| {
                        if let Some(p) = Preset::parse(&event_target_value(&ev)) {
                            settings.set(Settings::preset(p));
                        }
                    }
                    prop:value=move || settings.with(|s| s.preset.name())
                >
                    <option value="tiny">"tiny (about a minute)"</option>
                    <option value="paper">"paper (d=256, L=6, H=8, ctx 128)"</option>
                </select>
            </label>
            <label class="field">
                <span>"model"</span>
                <select
                    data-testid="model-kind"
                    disabled=busy
                    on:change=move |ev| {
                        let choice = event_target_value(&ev);
                        settings.update(|s| {
                            s.tsa = choice != "dense";
                            s.gate = gate_of(&choice).unwrap_or_default();
                            s.skip_halted &= halts_outright(s);
                        });
                    }
                    prop:value=move || settings.with(|s| if s.tsa { gate_value(s.gate) } else { "dense" })
                >
                    <option value="soft">"TSA, soft gate (the paper)"</option>
                    <option value="st-scaled">"TSA, straight-through ×(1 − p): trains what runs"</option>
                    <option value="st">"TSA, straight-through"</option>
                    <option value="gumbel">"TSA, Gumbel-sigmoid"</option>
                    <option value="dense">"dense baseline"</option>
                </select>
            </label>
            <Field label="d" get=|s| s.d_model.to_string() set=|s, v| { *s = s.clone().with_d_model(parse(v)?); Ok(()) } />
            <Field label="layers L" get=|s| s.n_layers.to_string() set=|s, v| { s.n_layers = parse(v)?; Ok(()) } />
            <Field label="λ" get=|s| s.lambda.to_string() set=|s, v| { s.lambda = parse(v)?; Ok(()) } />
            <Field label="target executed α" get=|s| s.target.map_or(String::new(), |t| t.to_string()) set=|s, v| { s.target = parse_target(v)?; Ok(()) } />
            <Field label="learning rate" get=|s| s.lr.to_string() set=|s, v| { s.lr = parse(v)?; Ok(()) } />
            <Field label="routers' lr ×" get=|s| s.router_lr_scale.to_string() set=|s, v| { s.router_lr_scale = parse(v)?; Ok(()) } />
            <label class="field" title="Tokens the gate halts skip the FFN in training too (1.2–1.4× faster on a CPU; not on WebGPU)">
                <span>"skip halted (CPU)"</span>
                <input
                    type="checkbox"
                    data-testid="skip-halted"
                    prop:checked=move || settings.with(|s| s.skip_halted)
                    disabled=move || busy.get() || !settings.with(halts_outright)
                    on:change=move |ev| {
                        let on = event_target_checked(&ev);
                        settings.update(|s| s.skip_halted = on);
                    }
                />
            </label>
            <Field label="batch" get=|s| s.batch.to_string() set=|s, v| { s.batch = parse(v)?; Ok(()) } />
            <Field label="steps" get=|s| s.steps.to_string() set=|s, v| { s.steps = parse(v)?; Ok(()) } />
            <div class="buttons">
                <button
                    data-testid="train-start"
                    disabled=move || busy.get() || status() == Status::Loading
                    on:click=move |_| ctx.send(Command::Start(settings.get_untracked()))
                >
                    "Start"
                </button>
                <button
                    data-testid="train-pause"
                    disabled=move || matches!(status(), Status::Idle | Status::Loading | Status::Done)
                    on:click=move |_| {
                        ctx.send(if busy.get_untracked() { Command::Pause } else { Command::Resume })
                    }
                >
                    {move || if busy.get() { "Pause" } else { "Resume" }}
                </button>
                <button data-testid="train-reset" on:click=move |_| ctx.send(Command::Reset)>
                    "Reset"
                </button>
            </div>
            // Resume continues the model as it is; the form describes the next Start's.
            <Show when=move || matches!(status(), Status::Paused | Status::Done)>
                <p class="muted" data-testid="form-hint">"The form applies at the next Start; Resume continues the current model."</p>
            </Show>
        </section>
    }
}
