//! Which device trains: the browser's WebGPU adapter, or Burn's flex CPU backend in wasm.
//!
//! "Auto" takes WebGPU only when the adapter is real hardware: a software fallback adapter
//! (SwiftShader in headless Chromium) is far slower than flex on the same CPU.

use std::cell::RefCell;
use std::sync::Mutex;

use burn::tensor::Device;
use burn::tensor::wgpu::WgpuBackend;
use js_sys::{Function, Promise, Reflect};
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;

use crate::protocol::Kind;

#[derive(Debug, Clone)]
pub struct Backend {
    pub kind: Kind,
    pub device: Device,
    /// What the page shows: the adapter's name, or why it runs on the CPU.
    pub label: String,
}

/// What `navigator.gpu.requestAdapter()` offers, read before Burn touches WebGPU.
#[derive(Debug, Clone)]
pub struct Adapter {
    pub name: String,
    pub fallback: bool,
}

/// Set by WebGPU's device-lost callback; the runner checks it before every step.
static LOST: Mutex<Option<String>> = Mutex::new(None);

thread_local! {
    /// Burn's wgpu runtime can be initialised once per worker.
    static WEBGPU: RefCell<Option<Backend>> = const { RefCell::new(None) };
}

pub fn device_lost() -> Option<String> {
    LOST.lock().ok().and_then(|l| l.clone())
}

fn field(obj: &JsValue, name: &str) -> JsValue {
    Reflect::get(obj, &JsValue::from_str(name)).unwrap_or(JsValue::UNDEFINED)
}

pub async fn probe() -> Option<Adapter> {
    // `navigator.gpu` exists in dedicated workers too; there is no `window` to ask.
    let navigator = field(&js_sys::global(), "navigator");
    let gpu = field(&navigator, "gpu");
    if gpu.is_undefined() || gpu.is_null() {
        return None;
    }
    let request: Function = field(&gpu, "requestAdapter").dyn_into().ok()?;
    let promise: Promise = request.call0(&gpu).ok()?.dyn_into().ok()?;
    let adapter = JsFuture::from(promise).await.ok()?;
    if adapter.is_null() || adapter.is_undefined() {
        return None;
    }
    let info = field(&adapter, "info");
    let parts: Vec<String> = ["vendor", "architecture", "description"]
        .iter()
        .filter_map(|k| field(&info, k).as_string())
        .filter(|s| !s.is_empty())
        .collect();
    let fallback = field(&info, "isFallbackAdapter").as_bool().unwrap_or(false)
        || field(&adapter, "isFallbackAdapter")
            .as_bool()
            .unwrap_or(false);
    let name = match parts.is_empty() {
        true => "unnamed adapter".to_string(),
        false => parts.join(" "),
    };
    Some(Adapter { name, fallback })
}

/// The device for `requested` (None: auto).
pub async fn init(requested: Option<Kind>) -> Result<Backend, String> {
    let adapter = probe().await;
    let kind = match (requested, &adapter) {
        (Some(k), _) => k,
        (None, Some(a)) if !a.fallback => Kind::WebGpu,
        (None, _) => Kind::Cpu,
    };
    match kind {
        Kind::Cpu => Ok(cpu(match &adapter {
            None => "CPU (no WebGPU)".to_string(),
            Some(a) if a.fallback => format!(
                "CPU (flex): the WebGPU adapter ({}) is a software fallback, slower than the CPU",
                a.name
            ),
            Some(_) => "CPU (flex)".to_string(),
        })),
        Kind::WebGpu => match adapter {
            None => Err("this browser has no WebGPU adapter; use the CPU backend".into()),
            Some(a) => webgpu(&a).await,
        },
    }
}

pub fn cpu(label: String) -> Backend {
    Backend {
        kind: Kind::Cpu,
        device: Device::flex(),
        label,
    }
}

async fn webgpu(adapter: &Adapter) -> Result<Backend, String> {
    if let Some(b) = WEBGPU.with(|w| w.borrow().clone()) {
        return Ok(b);
    }
    let (device, setup) = Device::wgpu_options()
        .graphics_api(WgpuBackend::WebGpu)
        .init_with_setup_async()
        .await
        .map_err(|e| format!("WebGPU initialisation failed: {e}"))?;
    setup.device.set_device_lost_callback(|reason, message| {
        if let Ok(mut lost) = LOST.lock() {
            *lost = Some(format!("{reason:?}: {message}"));
        }
    });
    let mut label = format!("WebGPU: {}", adapter.name);
    if adapter.fallback {
        label.push_str(" (software fallback)");
    }
    let backend = Backend {
        kind: Kind::WebGpu,
        device,
        label,
    };
    WEBGPU.with(|w| *w.borrow_mut() = Some(backend.clone()));
    Ok(backend)
}
