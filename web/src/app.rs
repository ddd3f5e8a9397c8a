//! The page: controls, live numbers and charts, the routing heatmap, generation, files.

use futures::channel::mpsc::UnboundedSender;
use leptos::prelude::*;
use tsa_core::metrics::tlops_saved;
use wasm_bindgen::JsCast;
use web_sys::{HtmlInputElement, HtmlTextAreaElement};

use crate::backend::Kind;
use crate::chart::{LineChart, Series};
use crate::files;
use crate::heatmap::Heatmap;
use crate::runner::{self, Command, Status, Ui};
use crate::settings::{Preset, Settings};

fn fmt(v: Option<f64>, digits: usize) -> String {
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

/// The first file chosen in an `<input type=file>`, read to bytes, handed to `then`.
fn on_file(ev: &web_sys::Event, then: impl FnOnce(String, Vec<u8>) + 'static) {
    let Some(input) = ev
        .target()
        .and_then(|t| t.dyn_into::<HtmlInputElement>().ok())
    else {
        return;
    };
    let Some(file) = input.files().and_then(|f| f.get(0)) else {
        return;
    };
    input.set_value("");
    leptos::task::spawn_local(async move {
        let name = file.name();
        match files::read_file(&file).await {
            Ok(bytes) => then(name, bytes),
            Err(e) => leptos::logging::error!("reading {name}: {e}"),
        }
    });
}

#[component]
fn NumberField(
    label: &'static str,
    value: Signal<String>,
    on_set: impl Fn(&str) -> Result<(), String> + 'static,
    errors: RwSignal<Option<String>>,
    disabled: Signal<bool>,
) -> impl IntoView {
    view! {
        <label class="field">
            <span>{label}</span>
            <input
                type="text"
                inputmode="decimal"
                prop:value=value
                disabled=disabled
                on:change=move |ev| {
                    if let Err(e) = on_set(&event_target_value(&ev)) {
                        errors.set(Some(format!("{label}: {e}")));
                    }
                }
            />
        </label>
    }
}

fn parse<T: std::str::FromStr>(s: &str) -> Result<T, String> {
    s.trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a valid number"))
}

#[component]
pub fn App() -> impl IntoView {
    let ui = Ui::new();
    let tx: StoredValue<UnboundedSender<Command>> = StoredValue::new(runner::spawn(ui));
    // Copy (it captures only signal handles), so every button can own one.
    let send = move |cmd: Command| {
        if tx.with_value(|tx| tx.unbounded_send(cmd)).is_err() {
            ui.error
                .set(Some("the training task stopped; reload the page".into()));
        }
    };
    let settings = RwSignal::new(Settings::preset(Preset::Tiny));
    // `?model=URL`: open a checkpoint from any URL the browser can fetch (a shared trained model).
    if let Some(url) = files::query("model") {
        let url = js_sys::decode_uri_component(&url)
            .ok()
            .and_then(|u| u.as_string())
            .unwrap_or(url);
        send(Command::OpenUrl(url, settings.get_untracked()));
    }
    let busy = Signal::derive(move || ui.status.get() == Status::Running);
    let pasted = NodeRef::<leptos::html::Textarea>::new();

    let field = move |label: &'static str,
                      get: fn(&Settings) -> String,
                      set: fn(&mut Settings, &str) -> Result<(), String>| {
        view! {
            <NumberField
                label=label
                value=Signal::derive(move || settings.with(get))
                on_set=move |s| {
                    let mut next = settings.get_untracked();
                    set(&mut next, s)?;
                    settings.set(next);
                    Ok(())
                }
                errors=ui.error
                disabled=busy
            />
        }
    };

    let progress = move || {
        let (done, total) = ui.step.get();
        match total {
            0 => 0.0,
            t => done as f64 / t as f64,
        }
    };
    let tlops = move || {
        ui.eval
            .get()
            .map(|e| e.tlops_saved)
            .or_else(|| ui.alpha.get().map(|a| tlops_saved(a, ui.n_layers.get())))
    };

    view! {
        <header>
            <h1>"Token-Selective Attention"</h1>
            <p class="sub">
                "Train a transformer that learns which characters may skip its blocks — in this tab."
            </p>
            <p>
                "Backend: " <strong data-testid="backend">{move || ui.backend.get()}</strong> " "
                <select
                    aria-label="backend"
                    disabled=busy
                    on:change=move |ev| {
                        if let Some(k) = Kind::parse(&event_target_value(&ev)) {
                            send(Command::Backend(k));
                        }
                    }
                    prop:value=move || ui.backend_kind.get().map_or("", |k| k.name())
                >
                    <option value="webgpu">"WebGPU"</option>
                    <option value="cpu">"CPU (flex)"</option>
                </select>
            </p>
        </header>

        <Show when=move || ui.error.get().is_some()>
            <div class="error" data-testid="error" role="alert">
                <span>{move || ui.error.get().unwrap_or_default()}</span>
                <Show when=move || ui.offer_cpu.get()>
                    <button on:click=move |_| send(Command::Backend(Kind::Cpu))>"Continue on CPU"</button>
                </Show>
                <button class="dismiss" aria-label="dismiss" on:click=move |_| ui.error.set(None)>"×"</button>
            </div>
        </Show>

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
                    disabled=busy
                    on:change=move |ev| {
                        let tsa = event_target_value(&ev) == "tsa";
                        settings.update(|s| s.tsa = tsa);
                    }
                    prop:value=move || if settings.with(|s| s.tsa) { "tsa" } else { "dense" }
                >
                    <option value="tsa">"TSA"</option>
                    <option value="dense">"dense baseline"</option>
                </select>
            </label>
            {field("d", |s| s.d_model.to_string(), |s, v| { *s = s.clone().with_d_model(parse(v)?); Ok(()) })}
            {field("layers L", |s| s.n_layers.to_string(), |s, v| { s.n_layers = parse(v)?; Ok(()) })}
            {field("λ", |s| s.lambda.to_string(), |s, v| { s.lambda = parse(v)?; Ok(()) })}
            {field("learning rate", |s| s.lr.to_string(), |s, v| { s.lr = parse(v)?; Ok(()) })}
            {field("batch", |s| s.batch.to_string(), |s, v| { s.batch = parse(v)?; Ok(()) })}
            {field("steps", |s| s.steps.to_string(), |s, v| { s.steps = parse(v)?; Ok(()) })}
            <div class="buttons">
                <button
                    data-testid="train-start"
                    disabled=move || busy.get() || ui.status.get() == Status::Loading
                    on:click=move |_| send(Command::Start(settings.get_untracked()))
                >
                    "Start"
                </button>
                <button
                    data-testid="train-pause"
                    disabled=move || matches!(ui.status.get(), Status::Idle | Status::Loading | Status::Done)
                    on:click=move |_| {
                        send(if busy.get_untracked() { Command::Pause } else { Command::Resume })
                    }
                >
                    {move || if busy.get() { "Pause" } else { "Resume" }}
                </button>
                <button data-testid="train-reset" on:click=move |_| send(Command::Reset)>"Reset"</button>
            </div>
        </section>

        <section class="stats">
            <div class="progress">
                <span data-testid="step">
                    {move || {
                        let (d, t) = ui.step.get();
                        format!("{d} / {t}")
                    }}
                </span>
                <progress max="1" value=move || progress().to_string()></progress>
                <span>{move || format!("{} steps/s", fmt(ui.steps_per_s.get(), 2))}</span>
                <span>{move || format!("ETA {}", eta(ui.eta_s.get()))}</span>
                <span class="muted">
                    {move || format!("{:?}", ui.status.get()).to_lowercase()}
                </span>
            </div>
            <dl>
                <dt>"train loss"</dt>
                <dd data-testid="loss">{move || fmt(ui.loss.get().map(f64::from), 4)}</dd>
                <dt>"val loss"</dt>
                <dd data-testid="val-loss">{move || fmt(ui.eval.get().map(|e| e.loss), 4)}</dd>
                <dt>"val BPC"</dt>
                <dd>{move || fmt(ui.eval.get().map(|e| e.bpc), 3)}</dd>
                <dt>"soft α (mean 1 − p)"</dt>
                <dd data-testid="alpha">{move || fmt(ui.alpha.get(), 3)}</dd>
                <dt>"soft TLOps saved"</dt>
                <dd data-testid="tlops">{move || fmt(tlops().map(|t| 100.0 * t), 1)}"%"</dd>
                <dt>"executed α (p ≤ 0.5 runs)"</dt>
                <dd data-testid="executed-alpha">{move || fmt(ui.eval.get().map(|e| e.executed_alpha), 3)}</dd>
                <dt>"executed TLOps saved"</dt>
                <dd data-testid="executed-tlops">{move || fmt(ui.eval.get().map(|e| 100.0 * e.executed_tlops_saved), 1)}"%"</dd>
            </dl>
            <div class="charts">
                <LineChart
                    title="loss (nats)"
                    series=vec![
                        Series { name: "train", color: "#4472c4", points: ui.train_curve.into() },
                        Series { name: "val", color: "#d6561c", points: ui.val_curve.into() },
                    ]
                />
                <LineChart
                    title="α (val)"
                    series=vec![Series { name: "α", color: "#2e8b57", points: ui.alpha_curve.into() }]
                />
            </div>
        </section>

        <section>
            <h2>"Where the computation goes"</h2>
            <p class="muted">
                "A validation passage, one row per router l: the darker a character, the more of block l+1's update it received (1 − p"
                <sub>"l"</sub>"). Hover or focus a character for p at every router."
            </p>
            <Heatmap tokens=ui.passage testid="heatmap" empty="Start training to see the routing." />
        </section>

        <section>
            <h2>"Generate"</h2>
            <button data-testid="generate" disabled=busy on:click=move |_| send(Command::Generate)>
                "Generate 200 characters"
            </button>
            <Heatmap tokens=ui.generation testid="generation" empty="" />
        </section>

        <section class="files">
            <h2>"Model and text"</h2>
            <p>
                <button data-testid="checkpoint-download" on:click=move |_| send(Command::Download)>
                    "Download checkpoint"
                </button>
                " "
                <label class="file">
                    "Upload checkpoint "
                    <input
                        type="file"
                        accept=".tsa,application/octet-stream"
                        data-testid="checkpoint-upload"
                        on:change=move |ev| {
                            on_file(&ev, move |_, bytes| send(Command::Upload(bytes, settings.get_untracked())))
                        }
                    />
                </label>
            </p>
            <p>"Training text: " {move || ui.corpus.get()}</p>
            <p>
                <label class="file">
                    "Upload text "
                    <input
                        type="file"
                        accept="text/plain,.txt"
                        data-testid="corpus-upload"
                        on:change=move |ev| {
                            let context = settings.with_untracked(|s| s.context);
                            on_file(&ev, move |name, bytes| send(Command::Corpus { name, bytes, context }))
                        }
                    />
                </label>
            </p>
            <textarea node_ref=pasted rows="4" placeholder="…or paste a text to train on"></textarea>
            <button on:click=move |_| {
                let Some(area) = pasted.get_untracked() else { return };
                let area: HtmlTextAreaElement = area;
                let context = settings.with_untracked(|s| s.context);
                send(Command::Corpus { name: "pasted text".into(), bytes: area.value().into_bytes(), context })
            }>"Use pasted text"</button>
        </section>
    }
}
