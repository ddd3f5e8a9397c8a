//! The browser app in two halves that share only [`protocol`]: the page ([`page`]: Leptos
//! components, never a tensor) and a dedicated Web Worker ([`worker`]) that owns the model, its
//! optimiser and the corpus, so training never holds up the page's thread. Trunk builds them as
//! two wasm binaries: `tsa-web` (src/main.rs) and `worker` (src/bin/worker.rs).

pub mod js;
pub mod page;
pub mod protocol;
pub mod settings;
pub mod worker;

// Unit tests of the page's pure helpers run in headless Chromium with the browser test.
#[cfg(test)]
wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_browser);

#[cfg(target_family = "wasm")]
unsafe extern "C" {
    /// Synthesised by the linker: runs every static constructor (Burn's GPU runtime registers
    /// its IR dialects through `inventory` ctors).
    fn __wasm_call_ctors();
}

/// Runs the static constructors once. Called first thing from both entry points: a module that
/// never calls them itself is linked "command-style", with a call to every constructor at the
/// start of *every* exported function — every closure the browser calls, every value it hands
/// in — which measured seconds of the page's time per batch of worker messages.
pub fn run_constructors() {
    #[cfg(target_family = "wasm")]
    // SAFETY: called once, before any other code of the module runs.
    unsafe {
        __wasm_call_ctors()
    }
}
