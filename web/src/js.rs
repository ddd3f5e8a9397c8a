//! Browser plumbing that works in the page and in the worker alike: both have a global `fetch`
//! and `setTimeout`, but only the page has a `window`, so nothing here asks for one.

use js_sys::{Function, Promise, Reflect, Uint8Array};
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;
use web_sys::Response;

pub fn js_err(e: JsValue) -> String {
    e.as_string()
        .or_else(|| {
            e.dyn_ref::<js_sys::Error>()
                .map(|e| String::from(e.message()))
        })
        .or_else(|| js_sys::JSON::stringify(&e).ok().and_then(|s| s.as_string()))
        .unwrap_or_else(|| "unknown browser error".into())
}

/// The bytes at `url` (absolute, or relative to the calling script).
pub async fn fetch_bytes(url: &str) -> Result<Vec<u8>, String> {
    fetch_with(url, None).await
}

/// The same, refused if the server has not answered (the response's headers) within `ms`; a
/// large body then takes as long as it takes.
pub async fn fetch_bytes_answered_within(url: &str, ms: u32) -> Result<Vec<u8>, String> {
    fetch_with(url, Some(ms)).await
}

async fn fetch_with(url: &str, answer_ms: Option<u32>) -> Result<Vec<u8>, String> {
    let global = js_sys::global();
    let fetch: Function = Reflect::get(&global, &"fetch".into())
        .map_err(js_err)?
        .dyn_into()
        .map_err(|_| "this context has no fetch".to_string())?;
    let promise: Promise = fetch
        .call1(&global, &url.into())
        .map_err(js_err)?
        .dyn_into()
        .map_err(js_err)?;
    let answer = JsFuture::from(promise);
    let answered = match answer_ms {
        None => answer.await,
        Some(ms) => {
            let timeout = std::pin::pin!(sleep_ms(ms));
            match futures::future::select(answer, timeout).await {
                futures::future::Either::Left((answered, _)) => answered,
                futures::future::Either::Right(_) => {
                    return Err(format!("no answer in {} s", ms / 1000));
                }
            }
        }
    };
    let resp: Response = answered.map_err(js_err)?.dyn_into().map_err(js_err)?;
    if !resp.ok() {
        return Err(format!("HTTP {}", resp.status()));
    }
    let buf = JsFuture::from(resp.array_buffer().map_err(js_err)?)
        .await
        .map_err(js_err)?;
    Ok(Uint8Array::new(&buf).to_vec())
}

/// Waits `ms` milliseconds without blocking (lets queued messages and paints through).
pub async fn sleep_ms(ms: u32) {
    gloo_timers::future::TimeoutFuture::new(ms).await;
}

pub fn now_ms() -> f64 {
    js_sys::Date::now()
}
