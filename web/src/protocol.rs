//! What the page and the training worker say to each other: commands in, events out, plain data
//! only (no tensors cross). Messages travel as JS objects (serde-wasm-bindgen); byte payloads as
//! `Uint8Array`s, so a 13 MB checkpoint is one copy, not a JSON array of numbers.

use serde::{Deserialize, Serialize};
use tsa_core::{EvalStats, TsaConfig};
use wasm_bindgen::JsValue;

use crate::settings::Settings;

/// Which device trains: the browser's WebGPU adapter, or Burn's flex CPU backend in wasm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Kind {
    WebGpu,
    Cpu,
}

impl Kind {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "webgpu" => Some(Kind::WebGpu),
            "cpu" => Some(Kind::Cpu),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Kind::WebGpu => "webgpu",
            Kind::Cpu => "cpu",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Status {
    Loading,
    Idle,
    Running,
    Paused,
    Done,
}

/// One character with what every router said about it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TokenView {
    pub index: usize,
    pub ch: char,
    /// p_l at each router l (empty for the dense baseline).
    pub p: Vec<f32>,
}

/// Page → worker.
#[derive(Debug, Serialize, Deserialize)]
pub enum Command {
    /// The first message: the backend asked for (`?backend=`, None: auto) and the absolute URL
    /// of the bundled corpus (a worker resolves relative URLs against its own script).
    Init {
        backend: Option<Kind>,
        corpus_url: String,
    },
    Start(Settings),
    Pause,
    Resume,
    Reset,
    /// `sparse`: run only the blocks whose router says p ≤ 0.5 (§3.6); otherwise soft gates.
    Generate {
        sparse: bool,
    },
    Download,
    Upload {
        #[serde(with = "serde_bytes")]
        bytes: Vec<u8>,
        settings: Settings,
    },
    /// Fetch a checkpoint from an absolute URL, then as `Upload`.
    OpenUrl {
        url: String,
        settings: Settings,
    },
    Corpus {
        name: String,
        #[serde(with = "serde_bytes")]
        bytes: Vec<u8>,
        context: usize,
    },
    Backend(Kind),
}

/// Worker → page.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Event {
    /// The worker listens: commands sent before this would have been lost while its wasm loaded,
    /// so the page holds them until it arrives.
    Ready,
    Backend {
        label: String,
        kind: Kind,
    },
    Status(Status),
    Corpus(String),
    /// A message for the visitor; `None` clears the last one.
    Error(Option<String>),
    /// The WebGPU device was lost: offer to continue on the CPU.
    OfferCpu(bool),
    /// A new run view: nothing trained yet at `step` of `total` (a start, reset or upload).
    NewRun {
        step: usize,
        total: usize,
        n_layers: usize,
    },
    /// A model was loaded (an upload, `?model=`): the form takes its shape and routing, so that
    /// it describes the model on the page.
    Loaded(TsaConfig),
    /// The same run goes on from `step` on another device (a backend switch, the CPU after a
    /// lost WebGPU device): its history up to `step` stays.
    Continued {
        step: usize,
        total: usize,
    },
    Step(StepView),
    Eval {
        step: usize,
        /// With the training gates (noise off): soft α, the soft validation loss.
        stats: EvalStats,
        /// The validation loss with the inference rule executed (p > 0.5 skips), for models
        /// with routers.
        executed_loss: Option<f64>,
    },
    Passage(Vec<TokenView>),
    Generation {
        tokens: Vec<TokenView>,
        sparse: bool,
        /// Share of routed block updates that ran (1 − p soft; executed when sparse).
        alpha: f64,
    },
    Download {
        name: String,
        #[serde(with = "serde_bytes")]
        bytes: Vec<u8>,
    },
    /// The worker panicked: it must be restarted (the page reloads).
    Crashed(String),
}

/// One optimiser step as the page shows it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct StepView {
    pub step: usize,
    pub total: usize,
    pub loss: f32,
    /// Soft α of the training batch.
    pub alpha: f32,
    pub steps_per_s: Option<f64>,
    pub eta_s: Option<f64>,
}

/// Either side's message as a JS value for `postMessage`.
pub fn encode<T: Serialize>(msg: &T) -> Result<JsValue, String> {
    msg.serialize(&serde_wasm_bindgen::Serializer::new())
        .map_err(|e| format!("cannot encode a message: {e}"))
}

pub fn decode<T: for<'de> Deserialize<'de>>(value: JsValue) -> Result<T, String> {
    serde_wasm_bindgen::from_value(value).map_err(|e| format!("cannot decode a message: {e}"))
}
