//! The decoder: embeddings → stem block → (router → gated block)×(L−1) → LayerNorm → tied head.
//!
//! One forward path for every variant; only the gate handed to each block after the stem varies
//! (§2.1: h ← f₀(h), p_l = r_l(h), h ← f_{l+1}(h, p_l), l = 0…L−2).

use burn::module::{Module, Param};
use burn::nn::{Dropout, DropoutConfig, Embedding, LayerNorm, LayerNormConfig};
use burn::tensor::activation::{sigmoid, softmax};
use burn::tensor::{Device, Int, Tensor};

use crate::block::Block;
use crate::config::{Routing, TsaConfig};
use crate::error::Result;
use crate::gate::Gate;
use crate::init;
use crate::routing::{self, KeepScale, Router};
use crate::sparse;

/// How the routed blocks execute.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Execution {
    /// The training forward pass: the variant's training gate (soft 1 − p, straight-through or
    /// Gumbel for TSA, top-k for MoD), with noise and dropout; `progress` ∈ [0, 1] is how far
    /// through the schedule training is (the Gumbel gate anneals its temperature with it).
    /// With `skip_halted`, tokens whose gate is exactly 0 (a hard gate's halted tokens) skip the
    /// FFN for real, as in `Sparse` ([`Gate::from_values`]).
    Train { progress: f64, skip_halted: bool },
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

    /// How far through training the pass is (`Train` only): the Gumbel gate's schedule.
    pub fn progress(self) -> Option<f64> {
        match self {
            Execution::Train { progress, .. } => Some(progress),
            _ => None,
        }
    }

    /// Whether halted tokens skip the FFN in this (training) pass.
    pub fn skips_halted(self) -> bool {
        matches!(
            self,
            Execution::Train {
                skip_halted: true,
                ..
            }
        )
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

impl TsaModel {
    /// Builds the model with the paper's initialisation, refusing impossible shapes
    /// (`TsaConfig::init` calls this).
    pub fn new(config: &TsaConfig, device: &Device) -> Result<TsaModel> {
        let c = config;
        c.validate()?;
        let (d, l) = (c.d_model, c.n_layers);
        let routers = if c.routing.has_routers() {
            (0..c.n_routers())
                .map(|_| Router::init(c, device))
                .collect()
        } else {
            Vec::new()
        };
        let exit_norms = if c.routing == Routing::EarlyExit {
            (0..c.n_routers())
                .map(|_| LayerNormConfig::new(d).init(device))
                .collect()
        } else {
            Vec::new()
        };
        Ok(TsaModel {
            tok_emb: Embedding {
                weight: init::normal([c.vocab_size, d], init::STD, device),
            },
            pos_emb: init::normal([c.context, d], init::STD, device),
            blocks: (0..l).map(|_| Block::init(c, device)).collect(),
            routers,
            exit_norms,
            ln_f: LayerNormConfig::new(d).init(device),
            dropout: DropoutConfig::new(c.dropout).init(),
            config: c.clone(),
        })
    }

    /// The device the weights live on (an autodiff one while training).
    pub fn device(&self) -> Device {
        self.tok_emb.weight.val().device()
    }

    /// `tokens`: [B, T] with T ≤ context. Panics if T exceeds the context (callers crop).
    pub fn forward(&self, tokens: Tensor<2, Int>, exec: Execution) -> ModelOutput {
        let t = tokens.dims()[1];
        assert!(
            t <= self.config.context,
            "sequence length {t} exceeds the context {}",
            self.config.context
        );
        // §2.1: h ← f₀(h); then p_l = r_l(h), h ← f_{l+1}(h, p_l) for l = 0…L−2.
        let mut h = self.blocks[0].forward(self.embed(tokens, 0), &Gate::Open, None);
        let mut trace = Trace::new(self.config.routing, exec);
        for l in 0..self.config.n_routers() {
            let gate = self.gate(l, &h, exec, &mut trace);
            h = self.blocks[l + 1].forward(h, &gate, None);
        }
        trace.finish(self.logits(h), self.config.n_routers())
    }

    /// The gate of block l+1 from the state `h` [B, T, d] after block l; what the router did goes
    /// into `trace`.
    pub(crate) fn gate(&self, l: usize, h: &Tensor<3>, exec: Execution, trace: &mut Trace) -> Gate {
        use Execution::{Hard, Sparse, SparseQueries};
        match (self.config.routing, exec) {
            (Routing::Dense, _) => Gate::Open,
            (Routing::EarlyExit, _) => self.exit_gate(l, h, exec, trace),
            // TSA and MoD alike at inference: a token runs the block when 1 − p ≥ 0.5.
            (_, Hard(scale) | Sparse(scale) | SparseQueries(scale)) => {
                let p = self.routers[l].forward(h.clone());
                let keep = routing::kept(p.clone());
                let scale = scale.apply(keep.clone().float(), routing::soft_gate(p.clone()));
                trace.record(p, keep.clone().float());
                match exec {
                    Hard(_) => Gate::Soft(scale.unsqueeze_dim(2)),
                    Sparse(_) | SparseQueries(_) if sparse::on_device(&h.device()) => {
                        Gate::Compacted {
                            queries: matches!(exec, SparseQueries(_))
                                && sparse::queries_on_device(self.config.d_model),
                            scale: scale.unsqueeze_dim(2),
                        }
                    }
                    _ => sparse::hard_gate(keep, scale, matches!(exec, SparseQueries(_))),
                }
            }
            (Routing::Tsa { gate, .. }, _) => {
                let z = self.routers[l].logits(h.clone());
                let p = sigmoid(z.clone());
                let g = routing::tsa_gate(gate, z, p.clone(), exec.progress());
                trace.record(p, g.clone());
                // Gumbel's relaxed phase halts nothing outright: no gathering for nothing.
                let skip = exec.skips_halted() && routing::is_binary(gate, exec.progress());
                Gate::from_values(g, skip)
            }
            (Routing::MixtureOfDepths { capacity }, _) => {
                let p = self.routers[l].forward(h.clone());
                let w = routing::soft_gate(p.clone());
                let k = routing::capacity_k(capacity, h.dims()[1]);
                let chosen = routing::top_k_mask(w.clone().detach(), k);
                trace.add_router_aux(binary_cross_entropy(w.clone(), chosen.clone()));
                trace.record(p, chosen.clone());
                Gate::from_values(chosen * w, exec.skips_halted())
            }
        }
    }

    /// Early exit: the exit after block l is trained (`Train`/`Soft`), or decides which tokens
    /// leave (`Exit`: a leaving token's prediction is this exit's, its state stays frozen).
    fn exit_gate(&self, l: usize, h: &Tensor<3>, exec: Execution, trace: &mut Trace) -> Gate {
        let exit_logits = || self.head(self.exit_norms[l].forward(h.clone()));
        match exec {
            Execution::Exit { threshold } => {
                let [b, t, _] = h.dims();
                let (still, exited) = trace.exits.take().unwrap_or_else(|| {
                    let device = h.device();
                    let v = self.config.vocab_size;
                    (
                        Tensor::ones([b, t], &device),
                        Tensor::zeros([b, t, v], &device),
                    )
                });
                let logits = exit_logits();
                let confidence = softmax(logits.clone(), 2).max_dim(2).squeeze_dim::<2>(2);
                let leaves = still.clone() * confidence.greater_elem(threshold).float();
                let exited = exited + leaves.clone().unsqueeze_dim(2) * logits;
                let still = still - leaves;
                trace.record(still.clone().neg() + 1.0, still.clone());
                trace.exits = Some((still.clone(), exited));
                Gate::Soft(still.unsqueeze_dim(2))
            }
            e if e.is_soft() => {
                trace.exit_logits.push(exit_logits());
                Gate::Open
            }
            _ => Gate::Open,
        }
    }

    /// Token plus position embeddings of `tokens` [B, T] at positions `offset`…, dropped out in
    /// training.
    pub(crate) fn embed(&self, tokens: Tensor<2, Int>, offset: usize) -> Tensor<3> {
        let t = tokens.dims()[1];
        let pos = self.pos_emb.val().narrow(0, offset, t).unsqueeze::<3>();
        self.dropout.forward(self.tok_emb.forward(tokens) + pos)
    }

    /// Final LayerNorm and the tied head: [B, T, d] → [B, T, V].
    pub(crate) fn logits(&self, h: Tensor<3>) -> Tensor<3> {
        self.head(self.ln_f.forward(h))
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

/// What the routers did during one forward pass, gathered into a [`ModelOutput`] at the end.
pub(crate) struct Trace {
    pub(crate) halting: Vec<Tensor<2>>,
    active: Vec<Tensor<2>>,
    /// Early exit in training: collect every exit's logits (the final head's too).
    collect_exits: bool,
    exit_logits: Vec<Tensor<3>>,
    router_aux: Option<Tensor<1>>,
    /// Early-exit inference: which tokens still run [B, T], and the predictions of those that
    /// left [B, T, V].
    exits: Option<(Tensor<2>, Tensor<3>)>,
}

impl Trace {
    pub(crate) fn new(routing: Routing, exec: Execution) -> Self {
        Self {
            halting: Vec::new(),
            active: Vec::new(),
            collect_exits: routing == Routing::EarlyExit && exec.is_soft(),
            exit_logits: Vec::new(),
            router_aux: None,
            exits: None,
        }
    }

    /// Router l's halting probability p_l and the share of block l+1's update each token got.
    fn record(&mut self, p: Tensor<2>, active: Tensor<2>) {
        self.halting.push(p);
        self.active.push(active);
    }

    fn add_router_aux(&mut self, aux: Tensor<1>) {
        self.router_aux = Some(match self.router_aux.take() {
            Some(acc) => acc + aux,
            None => aux,
        });
    }

    /// The pass's output from the final head's `logits`.
    fn finish(mut self, logits: Tensor<3>, n_routers: usize) -> ModelOutput {
        let logits = match self.exits.take() {
            Some((still, exited)) => exited + still.unsqueeze_dim(2) * logits,
            None => logits,
        };
        if self.collect_exits {
            self.exit_logits.push(logits.clone());
        }
        ModelOutput {
            logits,
            halting: self.halting,
            active: self.active,
            exit_logits: self.exit_logits,
            router_aux: self.router_aux.map(|aux| aux.div_scalar(n_routers as f64)),
        }
    }
}

/// Mean binary cross-entropy of probabilities `p` against 0/1 `target`, clamped away from 0 and 1.
fn binary_cross_entropy(p: Tensor<2>, target: Tensor<2>) -> Tensor<1> {
    let p = p.clamp(1e-6, 1.0 - 1e-6);
    let pos = target.clone() * p.clone().log();
    let neg = (target.neg() + 1.0) * (p.neg() + 1.0).log();
    (pos + neg).neg().mean()
}
