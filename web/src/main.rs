//! The browser app: train a TSA model on WebGPU (or the CPU) and inspect its routing.

mod app;
mod backend;
mod chart;
mod files;
mod heatmap;
mod runner;
mod session;
mod settings;

fn main() {
    console_error_panic_hook::set_once();
    leptos::mount::mount_to_body(app::App);
}
