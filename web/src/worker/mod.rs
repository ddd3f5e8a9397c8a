//! The dedicated Web Worker that trains: it owns the backend, the model and the corpus. Commands
//! arrive as messages; everything the page shows leaves as [`Event`]s.

mod backend;
mod runner;
mod session;

use futures::channel::mpsc::{UnboundedSender, unbounded};
use wasm_bindgen::JsCast;
use wasm_bindgen::prelude::Closure;
use web_sys::{DedicatedWorkerGlobalScope, MessageEvent};

use crate::protocol::{self, Command, Event};

fn scope() -> Option<DedicatedWorkerGlobalScope> {
    js_sys::global().dyn_into().ok()
}

/// Sends `event` to the page. Only fails if the page is gone, when nobody is left to tell.
pub fn post(event: &Event) {
    if let (Some(scope), Ok(msg)) = (scope(), protocol::encode(event)) {
        let _ = scope.post_message(&msg);
    }
}

/// Installs the message handler and starts the runner.
pub fn start() {
    // A panic aborts this wasm instance: tell the page, which cannot see inside the worker.
    std::panic::set_hook(Box::new(|info| {
        console_error_panic_hook::hook(info);
        post(&Event::Crashed(info.to_string()));
    }));
    let Some(scope) = scope() else {
        web_sys::console::error_1(&"tsa worker: not started as a dedicated worker".into());
        return;
    };
    let (tx, rx) = unbounded();
    listen(&scope, tx);
    post(&Event::Ready);
    wasm_bindgen_futures::spawn_local(runner::run(rx));
}

fn listen(scope: &DedicatedWorkerGlobalScope, tx: UnboundedSender<Command>) {
    let on_message = Closure::<dyn Fn(MessageEvent)>::new(move |ev: MessageEvent| {
        match protocol::decode::<Command>(ev.data()) {
            Ok(cmd) => {
                let _ = tx.unbounded_send(cmd);
            }
            Err(e) => post(&Event::Error(Some(format!(
                "the worker ignored a command: {e}"
            )))),
        }
    });
    scope.set_onmessage(Some(on_message.as_ref().unchecked_ref()));
    // The handler lives as long as the worker.
    on_message.forget();
}
