//! The page: Leptos components that show what the training worker reports and send it what the
//! visitor asks. Each component takes what it needs from the [`Ctx`] context.

mod app;
mod bridge;
mod chart;
mod controls;
mod files;
mod generation;
mod heatmap;
mod routing;
mod state;
mod stats;

use leptos::prelude::*;

use crate::protocol::{Command, Event};
use crate::settings::Settings;
pub use state::{RunView, Shell, State};

/// Shared by every component: the view state, the form, and the line to the worker.
#[derive(Clone, Copy)]
pub struct Ctx {
    pub state: State,
    pub settings: RwSignal<Settings>,
    worker: StoredValue<Option<bridge::Bridge>, LocalStorage>,
}

impl Ctx {
    pub fn use_context() -> Self {
        expect_context::<Ctx>()
    }

    /// Sends `cmd` to the worker; a failure is shown, never a panic.
    pub fn send(&self, cmd: Command) {
        let sent = self.worker.with_value(|w| match w {
            Some(w) => w.send(&cmd),
            None => Err("the training worker did not start; reload the page".into()),
        });
        if let Err(e) = sent {
            self.state.fail(e);
        }
    }

    /// Training is running (the form is locked).
    pub fn busy(&self) -> Signal<bool> {
        let shell = self.state.shell;
        Signal::derive(move || shell.with(|s| s.status == crate::protocol::Status::Running))
    }
}

/// A `?name=value` parameter of the page's URL, decoded.
pub fn query(name: &str) -> Option<String> {
    let search = web_sys::window()?.location().search().ok()?;
    web_sys::UrlSearchParams::new_with_str(&search)
        .ok()?
        .get(name)
}

/// `url` made absolute against the page (the worker would resolve it against its own script).
fn absolute(url: &str) -> Option<String> {
    let href = web_sys::window()?.location().href().ok()?;
    Some(web_sys::Url::new_with_base(url, &href).ok()?.href())
}

/// A stopped page or worker: say so on the page (not only in the console) and offer the CPU
/// backend, the usual way out of a WebGPU error inside Burn's runtime.
fn crash_banner(msg: &str) {
    let Some(doc) = web_sys::window().and_then(|w| w.document()) else {
        return;
    };
    // One crash is often reported twice (the worker's panic hook, then its `onerror` as the
    // trap ends it): one banner, each message once (compared as text, before escaping).
    let seen = doc.query_selector(".crash .why").ok().flatten();
    let msg_html = msg
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;");
    if let Some(why) = seen {
        if !why.text_content().unwrap_or_default().contains(msg) {
            let _ = why.insert_adjacent_html("beforeend", &format!("<br><code>{msg_html}</code>"));
        }
        return;
    }
    let (Ok(div), Some(body)) = (doc.create_element("div"), doc.body()) else {
        return;
    };
    let _ = div.set_attribute("class", "error crash");
    let _ = div.set_attribute("data-testid", "error");
    let _ = div.set_attribute("role", "alert");
    let cpu = with_query("backend", "cpu").unwrap_or_else(|| "?backend=cpu".into());
    let cpu = cpu.replace('&', "&amp;").replace('"', "&quot;");
    div.set_inner_html(&format!(
        "<p><strong>The app stopped</strong> and must be reloaded: <span class=\"why\"><code>{msg_html}</code></span></p>\
         <p><a href=\"{cpu}\">Reload on the CPU backend</a> · <a href=\"\">Reload</a></p>"
    ));
    let _ = body.prepend_with_node_1(&div);
}

/// The page's query with `name` set to `value`, the rest (`?model=…`) kept.
fn with_query(name: &str, value: &str) -> Option<String> {
    let search = web_sys::window()?.location().search().ok()?;
    let params = web_sys::UrlSearchParams::new_with_str(&search).ok()?;
    params.set(name, value);
    Some(format!("?{}", String::from(params.to_string())))
}

/// Mounts the app and starts the worker.
pub fn start() {
    std::panic::set_hook(Box::new(|info| {
        console_error_panic_hook::hook(info);
        crash_banner(&info.to_string());
    }));
    leptos::mount::mount_to_body(|| {
        let state = State::new();
        let settings = RwSignal::new(Settings::preset(crate::settings::Preset::Tiny));
        let on_event = move |event: Event| match event {
            Event::Loaded(config) => settings.update(|s| s.describe(&config)),
            Event::Download { name, bytes } => {
                if let Err(e) = files::download(&bytes, &name) {
                    state.fail(format!("download failed: {e}"));
                }
            }
            Event::Crashed(why) => crash_banner(&why),
            other => state.apply(other),
        };
        let worker = match bridge::Bridge::spawn(on_event) {
            Ok(w) => Some(w),
            Err(e) => {
                state.fail(e);
                None
            }
        };
        let ctx = Ctx {
            state,
            settings,
            worker: StoredValue::new_local(worker),
        };
        provide_context(ctx);
        ctx.send(Command::Init {
            backend: query("backend").and_then(|s| crate::protocol::Kind::parse(&s)),
            corpus_url: absolute("tinyshakespeare.txt")
                .unwrap_or_else(|| "tinyshakespeare.txt".into()),
        });
        // `?model=URL`: open a checkpoint from any URL the browser can fetch (a shared model).
        if let Some(url) = query("model") {
            files::open_url(&ctx, &url);
        }
        view! { <app::App /> }
    });
}
