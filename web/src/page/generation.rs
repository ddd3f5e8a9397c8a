//! Generate: 200 characters from a validation prompt, with the soft gates or sparsely (only the
//! blocks whose router said p ≤ 0.5 run), coloured by what each character received.

use leptos::prelude::*;

use super::Ctx;
use super::heatmap::Heatmap;
use crate::protocol::Command;

#[component]
pub fn Generate() -> impl IntoView {
    let ctx = Ctx::use_context();
    let run = ctx.state.run;
    let busy = ctx.busy();
    let generation = Memo::new(move |_| run.with(|r| r.generation.clone()));
    let tokens = Signal::derive(move || {
        generation.with(|g| g.as_ref().map(|g| g.tokens.clone()).unwrap_or_default())
    });
    let sparse = Signal::derive(move || generation.with(|g| g.as_ref().is_some_and(|g| g.sparse)));
    // From a click until its text (or a message) arrives: the buttons wait, so clicks do not queue.
    let generating = RwSignal::new(false);
    let shell = ctx.state.shell;
    Effect::new(move || {
        // The run itself, not the memo: a generation equal to the last must end the wait too.
        run.track();
        shell.with(|s| s.error.is_some());
        generating.set(false);
    });
    let waiting = move || busy.get() || generating.get();
    let generate = move |sparse: bool| {
        generating.set(true);
        ctx.send(Command::Generate { sparse });
    };
    let summary = move || {
        if generating.get() {
            return Some("generating…".to_string());
        }
        generation.with(|g| {
            g.as_ref().map(|g| match g.sparse {
                true => format!(
                    "sparse: blocks ran for {:.1}% of the routed token-layers (executed α)",
                    100.0 * g.alpha
                ),
                false => format!(
                    "soft gates: mean 1 − p = {:.3} (soft α; every block ran)",
                    g.alpha
                ),
            })
        })
    };
    view! {
        <section>
            <h2>"Generate"</h2>
            <p>
                <button data-testid="generate" disabled=waiting on:click=move |_| generate(false)>
                    "Generate 200 characters (soft)"
                </button>
                " "
                <button data-testid="generate-sparse" disabled=waiting on:click=move |_| generate(true)>
                    "…sparse: skip what the routers skip"
                </button>
            </p>
            <p class="muted" data-testid="generation-summary">{summary}</p>
            <Heatmap tokens=tokens executed=sparse testid="generation" empty="" />
        </section>
    }
}
