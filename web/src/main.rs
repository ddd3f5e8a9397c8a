//! The browser app: train a TSA model on WebGPU (or the CPU) and inspect its routing.

mod app;
mod backend;
mod chart;
mod files;
mod heatmap;
mod runner;
mod session;
mod settings;

/// A panic stops the whole wasm instance (wasm32 aborts), so the page can no longer answer. Say
/// so on the page, not only in the console, and offer the CPU backend: the usual cause is a
/// WebGPU error inside Burn's runtime.
fn crash_banner(info: &std::panic::PanicHookInfo) {
    let Some(doc) = web_sys::window().and_then(|w| w.document()) else {
        return;
    };
    let (Ok(div), Some(body)) = (doc.create_element("div"), doc.body()) else {
        return;
    };
    let _ = div.set_attribute("class", "error crash");
    let _ = div.set_attribute("data-testid", "error");
    let _ = div.set_attribute("role", "alert");
    let msg = info.to_string().replace('&', "&amp;").replace('<', "&lt;");
    div.set_inner_html(&format!(
        "<p><strong>The app stopped</strong> and must be reloaded: <code>{msg}</code></p>\
         <p><a href=\"?backend=cpu\">Reload on the CPU backend</a> · <a href=\"\">Reload</a></p>"
    ));
    let _ = body.prepend_with_node_1(&div);
}

fn main() {
    std::panic::set_hook(Box::new(|info| {
        console_error_panic_hook::hook(info);
        crash_banner(info);
    }));
    leptos::mount::mount_to_body(app::App);
}
