//! Browser file plumbing: fetch, read an uploaded file, offer bytes as a download, yield.

use js_sys::{Array, Promise, Uint8Array};
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;
use web_sys::{Blob, BlobPropertyBag, File, HtmlAnchorElement, Response, Url};

fn js_err(e: JsValue) -> String {
    e.as_string()
        .or_else(|| js_sys::JSON::stringify(&e).ok().and_then(|s| s.as_string()))
        .unwrap_or_else(|| "unknown browser error".into())
}

fn window() -> Result<web_sys::Window, String> {
    web_sys::window().ok_or_else(|| "no window".to_string())
}

/// The bytes at `url` (relative to the page).
pub async fn fetch_bytes(url: &str) -> Result<Vec<u8>, String> {
    let resp: Response = JsFuture::from(window()?.fetch_with_str(url))
        .await
        .map_err(js_err)?
        .dyn_into()
        .map_err(js_err)?;
    if !resp.ok() {
        return Err(format!("{url}: HTTP {}", resp.status()));
    }
    let buf = JsFuture::from(resp.array_buffer().map_err(js_err)?)
        .await
        .map_err(js_err)?;
    Ok(Uint8Array::new(&buf).to_vec())
}

pub async fn read_file(file: &File) -> Result<Vec<u8>, String> {
    let buf = JsFuture::from(file.array_buffer()).await.map_err(js_err)?;
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
    let document = window()?.document().ok_or("no document")?;
    let a: HtmlAnchorElement = document
        .create_element("a")
        .map_err(js_err)?
        .dyn_into()
        .map_err(|_| "could not create a link".to_string())?;
    a.set_href(&url);
    a.set_download(name);
    a.click();
    Url::revoke_object_url(&url).map_err(js_err)
}

/// Lets the browser paint and handle input before the next piece of work.
pub async fn yield_now() {
    sleep_ms(0).await;
}

/// Waits `ms` milliseconds without blocking the page.
pub async fn sleep_ms(ms: i32) {
    let promise = Promise::new(&mut |resolve, _| {
        if let Some(w) = web_sys::window() {
            let _ = w.set_timeout_with_callback_and_timeout_and_arguments_0(&resolve, ms);
        }
    });
    let _ = JsFuture::from(promise).await;
}

/// A `?name=value` parameter of the page's URL.
pub fn query(name: &str) -> Option<String> {
    let search = web_sys::window()?.location().search().ok()?;
    search
        .trim_start_matches('?')
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.to_string())
}

pub fn now_ms() -> f64 {
    js_sys::Date::now()
}
