//! The decoder: embeddings → stem block → (router → gated block)×(L−1) → LayerNorm → tied head.
//!
//! One forward path for every variant; only the gate handed to each block after the stem varies
//! (§2.1: h ← f₀(h), p_l = r_l(h), h ← f_{l+1}(h, p_l), l = 0…L−2).

use burn::module::{Module, Param};
use burn::nn::{Dropout, DropoutConfig, Embedding, LayerNorm, LayerNormConfig};
use burn::tensor::activation::{sigmoid, softmax};
use burn::tensor::{Device, Int, Tensor};

use crate::block::{Block, Gate};
use crate::config::{Routing, TsaConfig};
use crate::error::Result;
use crate::init;
use crate::routing::{self, KeepScale, Router};
use crate::sparse;

/// How the routed blocks execute.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Execution {
    /// The training forward pass: the variant's training gate (soft 1 − p, straight-through or
    /// Gumbel for TSA, top-k for MoD), with noise and dropout; `progress` ∈ [0, 1] is how far
    /// through the schedule training is (the Gumbel gate anneals its temperature with it).
    Train { progress: f64 },
    /// The training gate without noise: validation loss and soft α are measured this way.
    Soft,
    /// The inference rule (TSA and MoD: a token runs block l+1 when p_l ≤ 0.5) by masking: every
    /// token still computes, no host read, any device. Outputs equal `Sparse`'s.
    Hard(KeepScale),
    /// Hard routing at inference with real skipped work: TSA tokens with p > 0.5 skip the FFN by
    /// gather/scatter and their attention update is masked (§3.6); MoD keeps the tokens whose
    /// router weight 1 − p ≥ 0.5 (a causal rule, trained by the auxiliary loss); dense and early
    /// exit run every block.
    Sparse(KeepScale),
    /// `Sparse`, and halted tokens also skip their attention query rows and Q/output projections
    /// (K and V are still computed for every token). Beyond the paper; same outputs.
    SparseQueries(KeepScale),
    /// Early-exit inference: a token stops after the first block whose exit classifier's max
    /// softmax probability exceeds `threshold`; its state is frozen and its prediction is that
    /// exit's. Other variants run as in `Soft`.
    Exit { threshold: f64 },
}

impl Execution {
    /// Whether this runs the variant's training gate (`Train` or `Soft`).
    pub fn is_soft(self) -> bool {
        matches!(self, Execution::Train { .. } | Execution::Soft)
    }
}

/// What a forward pass produces besides the logits.
#[derive(Debug, Clone)]
pub struct ModelOutput {
    /// [B, T, V] next-token logits.
    pub logits: Tensor<3>,
    /// Per router l = 0…L−2: halting probability p_l [B, T] (early exit: 1 once exited).
    pub halting: Vec<Tensor<2>>,
    /// Per router: the share of block l+1's update each token received [B, T] — 1 − p_l for
    /// soft TSA, the executed 0/1 mask for hard routing, MoD's and early exit's.
    pub active: Vec<Tensor<2>>,
    /// Early exit in training: logits of the exit after every block (the last is `logits`).
    pub exit_logits: Vec<Tensor<3>>,
    /// MoD: the router's binary cross-entropy against its own top-k choice (the auxiliary loss
    /// of Raposo et al. that makes the causal inference rule possible).
    pub router_aux: Option<Tensor<1>>,
}

#[derive(Module, Debug)]
pub struct TsaModel {
    /// Token embedding, also the output head (tied). No padding index: token 0 is a real
    /// character (newline in Tiny-Shakespeare) whose gradient must flow.
    pub tok_emb: Embedding,
    /// Learned positions [context, d].
    pub pos_emb: Param<Tensor<2>>,
    pub blocks: Vec<Block>,
    /// r_0 … r_{L−2} (TSA and MoD only).
    pub routers: Vec<Router>,
    /// Early exit only: LayerNorm before each of the exits after blocks 0…L−2.
    pub exit_norms: Vec<LayerNorm>,
    pub ln_f: LayerNorm,
    /// On the embedding sum, in training only.
    pub dropout: Dropout,
    #[module(skip)]
    pub config: TsaConfig,
}

impl TsaConfig {
    /// Builds the model with the paper's initialisation, refusing impossible shapes.
    pub fn init(&self, device: &Device) -> Result<TsaModel> {
        self.validate()?;
        let (d, l) = (self.d_model, self.n_layers);
        let routers = if self.routing.has_routers() {
            (0..self.n_routers())
                .map(|_| Router::init(self, device))
                .collect()
        } else {
            Vec::new()
        };
        let exit_norms = if self.routing == Routing::EarlyExit {
            (0..self.n_routers())
                .map(|_| LayerNormConfig::new(d).init(device))
                .collect()
        } else {
            Vec::new()
        };
        Ok(TsaModel {
            tok_emb: Embedding {
                weight: init::normal([self.vocab_size, d], init::STD, device),
            },
            pos_emb: init::normal([self.context, d], init::STD, device),
            blocks: (0..l).map(|_| Block::init(self, device)).collect(),
            routers,
            exit_norms,
            ln_f: LayerNormConfig::new(d).init(device),
            dropout: DropoutConfig::new(self.dropout).init(),
            config: self.clone(),
        })
    }
}

impl TsaModel {
    /// The device the weights live on (an autodiff one while training).
    pub fn device(&self) -> Device {
        self.tok_emb.weight.val().device()
    }

    /// `tokens`: [B, T] with T ≤ context. Panics if T exceeds the context (callers crop).
    pub fn forward(&self, tokens: Tensor<2, Int>, exec: Execution) -> ModelOutput {
        let [b, t] = tokens.dims();
        assert!(
            t <= self.config.context,
            "sequence length {t} exceeds the context {}",
            self.config.context
        );
        let device = tokens.device();
        let pos = self.pos_emb.val().narrow(0, 0, t).unsqueeze::<3>();
        let x = self.dropout.forward(self.tok_emb.forward(tokens) + pos);
        let mut h = self.blocks[0].forward(x, &Gate::Open);

        let mut out = ModelOutput {
            logits: Tensor::zeros([1, 1, 1], &device),
            halting: Vec::new(),
            active: Vec::new(),
            exit_logits: Vec::new(),
            router_aux: None,
        };
        // Early-exit inference: which tokens still run, and the predictions of those that left.
        let mut exits: Option<(Tensor<2>, Tensor<3>)> = match (self.config.routing, exec) {
            (Routing::EarlyExit, Execution::Exit { .. }) => Some((
                Tensor::ones([b, t], &device),
                Tensor::zeros([b, t, self.config.vocab_size], &device),
            )),
            _ => None,
        };

        for l in 0..self.config.n_routers() {
            let gate = match (self.config.routing, exec) {
                (Routing::Dense, _) => Gate::Open,
                // TSA and MoD alike: a token runs the block when its router weight 1 − p ≥ 0.5.
                (
                    Routing::Tsa { .. } | Routing::MixtureOfDepths { .. },
                    Execution::Hard(scale)
                    | Execution::Sparse(scale)
                    | Execution::SparseQueries(scale),
                ) => {
                    let p = self.routers[l].forward(h.clone());
                    let keep = routing::kept(p.clone());
                    let keep_f = keep.clone().float();
                    let scale = scale.apply(keep_f.clone(), p.clone().neg() + 1.0);
                    out.halting.push(p);
                    out.active.push(keep_f);
                    match exec {
                        Execution::Hard(_) => Gate::Soft(scale.unsqueeze_dim(2)),
                        _ => hard_gate(keep, scale, matches!(exec, Execution::SparseQueries(_))),
                    }
                }
                (Routing::Tsa { gate, .. }, _) => {
                    let z = self.routers[l].logits(h.clone());
                    let p = sigmoid(z.clone());
                    let progress = match exec {
                        Execution::Train { progress } => Some(progress),
                        _ => None,
                    };
                    let g = routing::tsa_gate(gate, z, p.clone(), progress);
                    out.halting.push(p);
                    out.active.push(g.clone());
                    Gate::Soft(g.unsqueeze_dim(2))
                }
                (Routing::MixtureOfDepths { capacity }, _) => {
                    let p = self.routers[l].forward(h.clone());
                    let w = p.clone().neg() + 1.0;
                    let chosen =
                        routing::top_k_mask(w.clone().detach(), routing::capacity_k(capacity, t));
                    let aux = binary_cross_entropy(w.clone(), chosen.clone());
                    out.router_aux = Some(match out.router_aux.take() {
                        Some(acc) => acc + aux,
                        None => aux,
                    });
                    out.halting.push(p);
                    out.active.push(chosen.clone());
                    Gate::Soft((chosen * w).unsqueeze_dim(2))
                }
                (Routing::EarlyExit, Execution::Exit { threshold }) => {
                    let (still, exited) =
                        exits.take().expect("initialised for early-exit inference");
                    let logits = self.head(self.exit_norms[l].forward(h.clone()));
                    let confidence = softmax(logits.clone(), 2).max_dim(2).squeeze_dim::<2>(2);
                    let leaves = still.clone() * confidence.greater_elem(threshold).float();
                    let exited = exited + leaves.clone().unsqueeze_dim(2) * logits;
                    let still = still - leaves;
                    out.halting.push(still.clone().neg() + 1.0);
                    out.active.push(still.clone());
                    exits = Some((still.clone(), exited));
                    Gate::Soft(still.unsqueeze_dim(2))
                }
                (Routing::EarlyExit, e) if e.is_soft() => {
                    out.exit_logits
                        .push(self.head(self.exit_norms[l].forward(h.clone())));
                    Gate::Open
                }
                (Routing::EarlyExit, _) => Gate::Open,
            };
            h = self.blocks[l + 1].forward(h, &gate);
        }

        let logits = self.head(self.ln_f.forward(h));
        out.logits = match (self.config.routing, exec) {
            (Routing::EarlyExit, Execution::Exit { .. }) => match exits {
                Some((still, exited)) => exited + still.unsqueeze_dim(2) * logits,
                None => logits,
            },
            (Routing::EarlyExit, e) if e.is_soft() => {
                out.exit_logits.push(logits.clone());
                logits
            }
            _ => logits,
        };
        if let Some(aux) = out.router_aux.take() {
            out.router_aux = Some(aux.div_scalar(self.config.n_routers() as f64));
        }
        out
    }

    /// Output head tied to the token embedding: [B, T, d] → [B, T, V].
    fn head(&self, x: Tensor<3>) -> Tensor<3> {
        let [b, t, d] = x.dims();
        let w = self.tok_emb.weight.val(); // [V, d]
        x.reshape([b * t, d])
            .matmul(w.transpose())
            .reshape([b, t, self.config.vocab_size])
    }
}

/// A hard gate for the tokens `keep` [B, T], updates scaled by `scale` [B, T].
fn hard_gate(keep: Tensor<2, burn::tensor::Bool>, scale: Tensor<2>, skip_queries: bool) -> Gate {
    let [b, t] = keep.dims();
    let keep = sparse::keep_indices(keep);
    let queries = skip_queries.then(|| sparse::positions_per_sequence(&keep, b, t));
    Gate::Hard {
        keep,
        scale: scale.unsqueeze_dim(2),
        queries,
    }
}

/// Mean binary cross-entropy of probabilities `p` against 0/1 `target`, clamped away from 0 and 1.
fn binary_cross_entropy(p: Tensor<2>, target: Tensor<2>) -> Tensor<1> {
    let p = p.clamp(1e-6, 1.0 - 1e-6);
    let pos = target.clone() * p.clone().log();
    let neg = (target.neg() + 1.0) * (p.neg() + 1.0).log();
    (pos + neg).neg().mean()
}
