//! The page's layout: a header with the backend, the message banner, then one component per part.

use leptos::prelude::*;

use super::Ctx;
use super::controls::{BackendSelect, Controls};
use super::files::Files;
use super::generation::Generate;
use super::routing::Routing;
use super::stats::Stats;
use crate::protocol::{Command, Kind};

#[component]
pub fn App() -> impl IntoView {
    view! {
        <header>
            <h1>"Token-Selective Attention"</h1>
            <p class="sub">
                "Train a transformer that learns which characters may skip its blocks — in this tab."
            </p>
            <BackendSelect />
        </header>
        <ErrorBanner />
        <Controls />
        <Stats />
        <Routing />
        <Generate />
        <Files />
    }
}

#[component]
fn ErrorBanner() -> impl IntoView {
    let ctx = Ctx::use_context();
    let shell = ctx.state.shell;
    view! {
        // A dismissed message keeps the way out of a lost device on screen.
        <Show when=move || shell.with(|s| s.error.is_some() || s.offer_cpu)>
            <div class="error" data-testid="error" role="alert">
                <span>
                    {move || shell.with(|s| s.error.clone().unwrap_or_else(|| "The WebGPU device was lost.".into()))}
                </span>
                <Show when=move || shell.with(|s| s.offer_cpu)>
                    <button on:click=move |_| ctx.send(Command::Backend(Kind::Cpu))>
                        "Continue on CPU"
                    </button>
                </Show>
                <button
                    class="dismiss"
                    aria-label="dismiss"
                    on:click=move |_| shell.update(|s| s.error = None)
                >
                    "×"
                </button>
            </div>
        </Show>
    }
}
