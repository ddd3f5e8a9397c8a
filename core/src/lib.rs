//! Token-Selective Attention (TSA): a pre-norm decoder whose blocks after the stem are gated per
//! token by learned routers, with the dense, early-exit and Mixture-of-Depths baselines.
//!
//! Where the paper's parts live: routers and gates (§2.2) in [`routing`], the gated block update
//! (§2.3) in [`block`] with its [`gate`], depth loss and α/TLOps (§2.4–2.5) in [`metrics`], sparse inference (§3.6)
//! in [`sparse`], the forward pass (§2.1) in [`model`].

pub mod attention;
pub mod block;
pub mod char_class;
pub mod checkpoint;
pub mod config;
pub mod data;
pub mod error;
#[cfg(not(target_family = "wasm"))]
pub mod export;
pub mod ffn;
mod flex_kernel;
mod framed;
#[cfg(not(target_family = "wasm"))]
pub mod fused_attention;
pub mod gate;
pub mod gelu;
pub mod generate;
pub mod init;
pub mod loss;
pub mod metrics;
pub mod model;
pub mod optim;
pub mod read;
pub mod recipe;
pub mod routing;
pub mod sparse;
pub mod train;
pub mod train_state;

pub use config::{InitScheme, Routing, RoutingKind, TsaConfig, TsaGate};
pub use error::{Result, TsaError};
pub use model::{Execution, ModelOutput, TsaModel};
pub use optim::TrainConfig;
pub use recipe::{Preset, Recipe};
pub use routing::KeepScale;
pub use train::{EvalStats, StepStats, Trainer, evaluate};
