#!/usr/bin/env python3
"""The PyTorch twin: tsa-core's architecture and training recipe written independently in PyTorch,
to check that we train as well as PyTorch does (issue 13). Not run in CI (PyPI's torch wheel
brings gigabytes of CUDA libraries); CI runs the NumPy forward-pass twin in twin.py instead.

    torch_twin.py train --recipe quick --routing dense [--gate soft|st] [--lambda 0.001] [--target A]
                        [--steps N] [--seed S] [--out model.safetensors] [--log curve.jsonl]
                        [--init-from W.safetensors] [--export-init W.safetensors] [--windows W.json]
    torch_twin.py compare OURS.jsonl THEIRS.jsonl     # validation curves side by side

The model matches tsa-core one-to-one (checked on shared weights by tests/parity.rs through
twin.py): pre-norm blocks, fused QKV without bias, tied head, learned positions, routers
σ(W₂ReLU(W₁h+b₁)+b₂) after every block but the last, gates h += g·Δ. Initialisation as
Appendix A, PyTorch's default for the layers it does not name; dropout 0.1 (paper recipe) on the
embedding sum, the attention probabilities, after the FFN's GELU and after its second layer.
`--out` writes a safetensors file that `native-bench import` turns into a tsa checkpoint.
"""
import argparse
import json
import math
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

RECIPES = {
    # name: (d, L, H, d_ff, ctx, batch, lr, steps, dropout, eval_every, eval_batches)
    "quick": (128, 6, 4, 512, 64, 16, 2e-3, 600, 0.0, 100, 16),
    "paper": (256, 6, 8, 1024, 128, 64, 3e-4, 5000, 0.1, 250, 20),
}


class Block(nn.Module):
    def __init__(self, d, h, d_ff, n_layers, p):
        super().__init__()
        self.h, self.p = h, p
        self.ln_attn, self.ln_ffn = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d, bias=False)  # unnamed in Appendix A: PyTorch default
        self.attn_proj = nn.Linear(d, d, bias=False)
        self.fc = nn.Linear(d, d_ff)
        self.ffn_proj = nn.Linear(d_ff, d)
        std = 0.02 / math.sqrt(2 * n_layers)  # residual projections (Appendix A)
        for lin in (self.attn_proj, self.ffn_proj):
            nn.init.normal_(lin.weight, 0.0, std)
            if lin.bias is not None:
                nn.init.zeros_(lin.bias)
        self.drop = nn.Dropout(p)

    def attention(self, x):
        B, T, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=2)
        heads = lambda m: m.view(B, T, self.h, d // self.h).transpose(1, 2)
        y = F.scaled_dot_product_attention(
            heads(q), heads(k), heads(v), is_causal=True, dropout_p=self.p if self.training else 0.0
        )
        return self.attn_proj(y.transpose(1, 2).reshape(B, T, d))

    def forward(self, h, g):
        h = h + g * self.attention(self.ln_attn(h))
        return h + g * self.drop(self.ffn_proj(self.drop(F.gelu(self.fc(self.ln_ffn(h))))))


class Router(nn.Module):
    def __init__(self, d, hidden, bias):
        super().__init__()
        self.fc, self.out = nn.Linear(d, hidden), nn.Linear(hidden, 1)
        nn.init.constant_(self.out.bias, bias)

    def forward(self, h):
        return self.out(F.relu(self.fc(h))).squeeze(-1)  # the halting logit z, p = σ(z)


class Twin(nn.Module):
    def __init__(self, vocab, d, L, H, d_ff, ctx, p, routing):
        super().__init__()
        self.routing = routing
        self.tok_emb = nn.Embedding(vocab, d)
        self.pos_emb = nn.Parameter(torch.randn(ctx, d) * 0.02)
        nn.init.normal_(self.tok_emb.weight, 0.0, 0.02)
        self.blocks = nn.ModuleList(Block(d, H, d_ff, L, p) for _ in range(L))
        self.routers = nn.ModuleList(
            Router(d, d // 4, -1.0) for _ in range(L - 1) if routing["kind"] == "tsa"
        )
        self.ln_f, self.drop = nn.LayerNorm(d), nn.Dropout(p)

    def forward(self, x):
        T = x.shape[1]
        h = self.blocks[0](self.drop(self.tok_emb(x) + self.pos_emb[:T]), 1.0)
        active, executed = [], []
        for l, block in enumerate(self.blocks[1:]):
            g = 1.0
            if self.routers:
                p = torch.sigmoid(self.routers[l](h))
                soft, hard = 1 - p, (p <= 0.5).float()
                g = soft if self.routing["gate"] == "soft" else hard + (soft - soft.detach())
                active.append(g)
                executed.append(hard)
                g = g.unsqueeze(-1)
            h = block(h, g)
        logits = self.ln_f(h) @ self.tok_emb.weight.T
        return logits, active, executed


def data(path):
    text = open(path, encoding="utf-8").read()
    chars = sorted(set(text))
    ids = np.searchsorted(np.array(chars), np.array(list(text)))
    n = len(ids)
    return chars, ids[: int(0.8 * n)], ids[int(0.8 * n) : int(0.9 * n)]


def batch(split, b, ctx, rng):
    return windows(split, ctx, rng.integers(0, len(split) - ctx - 1, b))


def windows(split, ctx, starts):
    x = np.stack([split[s : s + ctx] for s in starts])
    y = np.stack([split[s + 1 : s + ctx + 1] for s in starts])
    return torch.from_numpy(x).long(), torch.from_numpy(y).long()


def train(a):
    d, L, H, d_ff, ctx, bsz, lr, steps, p, every, n_eval = RECIPES[a.recipe]
    steps = a.steps or steps
    torch.manual_seed(a.seed)
    rng = np.random.default_rng(a.seed)
    chars, tr, va = data(a.corpus)
    routing = {"kind": a.routing, "gate": a.gate}
    model = Twin(len(chars), d, L, H, d_ff, ctx, p, routing)
    if a.init_from:
        load(model, a.init_from)
    if a.export_init:
        export(model, a, chars, (d, L, H, d_ff, ctx, p), path=a.export_init, step=0)
    decay = [q for n, q in model.named_parameters() if q.dim() >= 2 and "emb" not in n]
    rest = [q for n, q in model.named_parameters() if not (q.dim() >= 2 and "emb" not in n)]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
        lr=lr, betas=(0.9, 0.95), eps=1e-8,
    )
    sched = lambda s: 0.1 + 0.45 * (1 + math.cos(math.pi * min(s / steps, 1.0)))
    val_rng = np.random.default_rng(4242)
    val = [batch(va, bsz, ctx, val_rng) for _ in range(n_eval)]
    replay = None
    if a.windows:  # tsa-core's own batch stream and validation windows (`train --windows-out`)
        w = json.load(open(a.windows))
        if w["context"] != ctx or len(w["train"]) < steps or len(w["train"][0]) != bsz:
            sys.exit(f"{a.windows}: windows for context {w['context']}, {len(w['train'])} steps of {len(w['train'][0])} do not fit this run")
        replay = [windows(tr, ctx, starts) for starts in w["train"]]
        val = [windows(va, ctx, starts) for starts in w["val"]]
    mu, curve, log = 0.0, [], open(a.log, "w") if a.log else None
    t0 = time.time()
    for s in range(steps):
        for g in opt.param_groups:
            g["lr"] = lr * sched(s)
        model.train()
        x, y = replay[s] if replay else batch(tr, bsz, ctx, rng)
        logits, active, executed = model(x)
        task = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        loss = task
        if active:
            loss = loss + (a.lam + mu) * torch.stack([g.mean() for g in active]).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if a.target is not None and executed:
            mu += 0.002 * (torch.stack([e.mean() for e in executed]).mean().item() - a.target)
        if (s + 1) % every == 0 or s + 1 == steps:
            model.eval()
            with torch.no_grad():
                losses, alphas = [], []
                for vx, vy in val:
                    lg, _, ex = model(vx)
                    losses.append(F.cross_entropy(lg.reshape(-1, lg.shape[-1]), vy.reshape(-1)).item())
                    alphas.append(torch.stack([e.mean() for e in ex]).mean().item() if ex else 1.0)
            point = {"step": s + 1, "val_loss": float(np.mean(losses)), "executed_alpha": float(np.mean(alphas))}
            curve.append(point)
            print(f"torch {a.routing} step {s + 1:5d}: val {point['val_loss']:.4f} executed α {point['executed_alpha']:.3f} ({time.time() - t0:.0f} s)", flush=True)
            if log:
                log.write(json.dumps(point) + "\n")
                log.flush()
    if a.out:
        export(model, a, chars, (d, L, H, d_ff, ctx, p))
    return curve


def named(model):
    """The twin's parameters under tsa-core's names (safetensors, PyTorch layout)."""
    t = {"tok_emb.weight": model.tok_emb.weight, "pos_emb": model.pos_emb, "ln_f.weight": model.ln_f.weight, "ln_f.bias": model.ln_f.bias}
    for i, b in enumerate(model.blocks):
        for ours, theirs in [("ln_attn", b.ln_attn), ("ln_ffn", b.ln_ffn)]:
            t[f"blocks.{i}.{ours}.weight"], t[f"blocks.{i}.{ours}.bias"] = theirs.weight, theirs.bias
        t[f"blocks.{i}.attn.qkv.weight"] = b.qkv.weight
        t[f"blocks.{i}.attn.proj.weight"] = b.attn_proj.weight
        for ours, theirs in [("fc", b.fc), ("proj", b.ffn_proj)]:
            t[f"blocks.{i}.ffn.{ours}.weight"], t[f"blocks.{i}.ffn.{ours}.bias"] = theirs.weight, theirs.bias
    for l, r in enumerate(model.routers):
        for ours, theirs in [("fc", r.fc), ("out", r.out)]:
            t[f"routers.{l}.{ours}.weight"], t[f"routers.{l}.{ours}.bias"] = theirs.weight, theirs.bias
    return t


def load(model, path):
    from safetensors.torch import load_file

    weights = load_file(path)
    with torch.no_grad():
        for name, p in named(model).items():
            p.copy_(weights[name].to(p.dtype))


def export(model, a, chars, shape, path=None, step=None):
    """Writes the weights under tsa-core's names and its metadata (`native-bench import` reads it)."""
    from safetensors.torch import save_file

    d, L, H, d_ff, ctx, p = shape
    gate = {"soft": "soft", "st": "straight_through"}[a.gate]
    routing = {"kind": "dense"} if a.routing == "dense" else {"kind": "tsa", "lambda": a.lam, "gate": {"kind": gate}, "target": a.target}
    config = {"vocab_size": len(chars), "d_model": d, "n_layers": L, "n_heads": H, "d_ff": d_ff, "context": ctx,
              "router_hidden": None, "routing": routing, "dropout": p, "init": "torch", "router_bias": -1.0}
    meta = {"config": config, "vocab": chars, "step": a.steps or RECIPES[a.recipe][7] if step is None else step}
    tensors = {k: v.detach().contiguous().float() for k, v in named(model).items()}
    save_file(tensors, path or a.out, metadata={"tsa": json.dumps(meta)})


def compare(ours, theirs):
    load = lambda f: {p["step"]: p for p in map(json.loads, open(f))}
    a, b = load(ours), load(theirs)
    print("| step | tsa-core val | PyTorch val | difference |\n| --- | --- | --- | --- |")
    for s in sorted(set(a) & set(b)):
        print(f"| {s} | {a[s]['val_loss']:.4f} | {b[s]['val_loss']:.4f} | {a[s]['val_loss'] - b[s]['val_loss']:+.4f} |")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train")
    t.add_argument("--recipe", choices=RECIPES, default="quick")
    t.add_argument("--routing", choices=["dense", "tsa"], default="tsa")
    t.add_argument("--gate", choices=["soft", "st"], default="soft")
    t.add_argument("--lambda", dest="lam", type=float, default=0.001)
    t.add_argument("--target", type=float)
    t.add_argument("--steps", type=int)
    t.add_argument("--seed", type=int, default=1337)
    t.add_argument("--corpus", default="data/tinyshakespeare.txt")
    t.add_argument("--out")
    t.add_argument("--log")
    t.add_argument("--init-from", help="start from these weights (safetensors, tsa-core's names)")
    t.add_argument("--export-init", help="write the initial weights here before training")
    t.add_argument("--windows", help="replay tsa-core's windows (native-bench train --windows-out)")
    c = sub.add_parser("compare")
    c.add_argument("ours")
    c.add_argument("theirs")
    a = ap.parse_args()
    if a.cmd == "train":
        torch.set_num_threads(max(1, torch.get_num_threads()))
        train(a)
    else:
        compare(a.ours, a.theirs)
