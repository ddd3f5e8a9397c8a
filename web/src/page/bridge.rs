//! The page's end of the worker: starts it, posts commands, and hands every event to a callback.
//! Commands wait in a queue until the worker says it listens; a worker that fails to load or dies
//! is reported as a crash.

use std::cell::RefCell;
use std::rc::Rc;

use wasm_bindgen::prelude::Closure;
use wasm_bindgen::{JsCast, JsValue};
use web_sys::{ErrorEvent, MessageEvent, Worker};

use crate::js::js_err;
use crate::protocol::{self, Command, Event};

/// Trunk's loader for the `worker` binary (src/bin/worker.rs), beside index.html.
const WORKER_SCRIPT: &str = "./worker_loader.js";

/// Commands posted before the worker listens (`None` once it does).
type Pending = Rc<RefCell<Option<Vec<JsValue>>>>;

pub struct Bridge {
    worker: Worker,
    pending: Pending,
}

impl Bridge {
    pub fn spawn(on_event: impl Fn(Event) + 'static) -> Result<Self, String> {
        let worker = Worker::new(WORKER_SCRIPT)
            .map_err(|e| format!("cannot start the training worker: {}", js_err(e)))?;
        let pending: Pending = Rc::new(RefCell::new(Some(Vec::new())));
        let on_event = Rc::new(on_event);
        let (handler, queue, target) = (on_event.clone(), pending.clone(), worker.clone());
        let on_message = Closure::<dyn Fn(MessageEvent)>::new(move |ev: MessageEvent| {
            match protocol::decode::<Event>(ev.data()) {
                Ok(Event::Ready) => {
                    for msg in queue.borrow_mut().take().unwrap_or_default() {
                        if let Err(e) = target.post_message(&msg) {
                            handler(Event::Error(Some(js_err(e))));
                        }
                    }
                }
                Ok(event) => handler(event),
                Err(e) => handler(Event::Error(Some(e))),
            }
        });
        worker.set_onmessage(Some(on_message.as_ref().unchecked_ref()));
        on_message.forget();
        // An uncaught error inside the worker (its script failed to load, or a trap after a panic).
        let on_error = Closure::<dyn Fn(ErrorEvent)>::new(move |ev: ErrorEvent| {
            on_event(Event::Crashed(format!(
                "the training worker stopped: {}",
                ev.message()
            )))
        });
        worker.set_onerror(Some(on_error.as_ref().unchecked_ref()));
        on_error.forget();
        Ok(Self { worker, pending })
    }

    pub fn send(&self, cmd: &Command) -> Result<(), String> {
        let msg = protocol::encode(cmd)?;
        if let Some(queue) = self.pending.borrow_mut().as_mut() {
            queue.push(msg);
            return Ok(());
        }
        self.worker
            .post_message(&msg)
            .map_err(|e| format!("the training worker is gone ({})", js_err(e)))
    }
}
