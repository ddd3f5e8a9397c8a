//! Model and text: download or upload a checkpoint, open one by URL, upload or paste a text; and
//! the browser plumbing for files (read an upload, offer bytes as a download).

use js_sys::{Array, Uint8Array};
use leptos::prelude::*;
use wasm_bindgen::JsCast;
use web_sys::{Blob, BlobPropertyBag, File, HtmlAnchorElement, HtmlInputElement, Url};

use super::Ctx;
use crate::js::js_err;
use crate::protocol::Command;

async fn read_file(file: &File) -> Result<Vec<u8>, String> {
    let buf = wasm_bindgen_futures::JsFuture::from(file.array_buffer())
        .await
        .map_err(js_err)?;
    Ok(Uint8Array::new(&buf).to_vec())
}

/// Offers `bytes` to the visitor as the file `name`.
pub fn download(bytes: &[u8], name: &str) -> Result<(), String> {
    let parts = Array::new();
    parts.push(&Uint8Array::from(bytes));
    let opts = BlobPropertyBag::new();
    opts.set_type("application/octet-stream");
    let blob = Blob::new_with_u8_array_sequence_and_options(&parts, &opts).map_err(js_err)?;
    let url = Url::create_object_url_with_blob(&blob).map_err(js_err)?;
    let document = web_sys::window()
        .and_then(|w| w.document())
        .ok_or("no document")?;
    let a: HtmlAnchorElement = document
        .create_element("a")
        .map_err(js_err)?
        .dyn_into()
        .map_err(|_| "could not create a link".to_string())?;
    a.set_href(&url);
    a.set_download(name);
    a.click();
    // Later, not at once: some browsers (Safari) start reading the blob after `click` returns.
    gloo_timers::callback::Timeout::new(60_000, move || {
        let _ = Url::revoke_object_url(&url);
    })
    .forget();
    Ok(())
}

/// The first file chosen in an `<input type=file>`, read to bytes, handed to `then`.
fn on_file(ctx: Ctx, ev: &web_sys::Event, then: impl FnOnce(String, Vec<u8>) + 'static) {
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
        match read_file(&file).await {
            Ok(bytes) => then(name, bytes),
            Err(e) => ctx.state.fail(format!("could not read {name}: {e}")),
        }
    });
}

/// Asks the worker to open the checkpoint at `url` (relative to the page, or absolute).
pub fn open_url(ctx: &Ctx, url: &str) {
    if url.is_empty() {
        return ctx.state.fail("enter the URL of a checkpoint (.tsa) first");
    }
    match super::absolute(url) {
        Some(abs) => ctx.send(Command::OpenUrl {
            url: abs,
            settings: ctx.settings.get_untracked(),
        }),
        None => ctx.state.fail(format!("{url:?} is not a URL")),
    }
}

#[component]
pub fn Files() -> impl IntoView {
    let ctx = Ctx::use_context();
    let settings = ctx.settings;
    let pasted = NodeRef::<leptos::html::Textarea>::new();
    let url = NodeRef::<leptos::html::Input>::new();
    let corpus = move || ctx.state.shell.with(|s| s.corpus.clone());
    view! {
        <section class="files">
            <h2>"Model and text"</h2>
            <p>
                <button data-testid="checkpoint-download" on:click=move |_| ctx.send(Command::Download)>
                    "Download checkpoint"
                </button>
                " "
                <label class="file">
                    "Upload checkpoint "
                    <input
                        type="file"
                        accept=".tsa,.state,application/octet-stream"
                        data-testid="checkpoint-upload"
                        on:change=move |ev| {
                            on_file(ctx, &ev, move |_, bytes| {
                                ctx.send(Command::Upload { bytes, settings: settings.get_untracked() })
                            })
                        }
                    />
                </label>
            </p>
            <p>
                <label>
                    "Open a model by URL "
                    <input type="url" node_ref=url data-testid="model-url" placeholder="https://…/model.tsa" />
                </label>
                " "
                <button data-testid="model-url-open" on:click=move |_| {
                    if let Some(input) = url.get_untracked() {
                        open_url(&ctx, input.value().trim());
                    }
                }>"Open"</button>
                <span class="muted">" (or link to this page with "<code>"?model=URL"</code>")"</span>
            </p>
            <p>"Training text: " {corpus}</p>
            <p>
                <label class="file">
                    "Upload text "
                    <input
                        type="file"
                        accept="text/plain,.txt"
                        data-testid="corpus-upload"
                        on:change=move |ev| {
                            let context = settings.with_untracked(|s| s.context);
                            on_file(ctx, &ev, move |name, bytes| ctx.send(Command::Corpus { name, bytes, context }))
                        }
                    />
                </label>
            </p>
            <textarea node_ref=pasted rows="4" placeholder="…or paste a text to train on"></textarea>
            <button on:click=move |_| {
                let Some(area) = pasted.get_untracked() else { return };
                let context = settings.with_untracked(|s| s.context);
                ctx.send(Command::Corpus { name: "pasted text".into(), bytes: area.value().into_bytes(), context })
            }>"Use pasted text"</button>
        </section>
    }
}
