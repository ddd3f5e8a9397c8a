#!/usr/bin/env python3
"""The PyTorch twin's forward pass in NumPy: the same architecture as tsa-core, read from a
safetensors export (`native-bench export`, PyTorch layout), for the parity test that CI runs.

    twin.py check MODEL.safetensors EXPECTED.json   # exit 0 when logits, p and loss agree to 1e-4

Only NumPy is needed (the safetensors container is parsed here: 8-byte header length, JSON
header, raw little-endian data). tests/parity/torch_twin.py is the same model in PyTorch, for
training curves side by side.
"""
import json
import math
import struct
import sys

import numpy as np

LN_EPS = 1e-5  # Burn's LayerNormConfig default, as PyTorch's
HALT_THRESHOLD = 0.5


def load_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    meta = header.pop("__metadata__", {})
    data = raw[8 + n :]
    dtypes = {"F32": np.float32, "F64": np.float64, "I64": np.int64}
    tensors = {}
    for name, info in header.items():
        lo, hi = info["data_offsets"]
        tensors[name] = np.frombuffer(data[lo:hi], dtype=dtypes[info["dtype"]]).reshape(info["shape"])
    return tensors, meta


def layer_norm(x, w, b):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + LN_EPS) * w + b


_erf = np.vectorize(math.erf)


def gelu(x):
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def softmax(x, axis=-1):
    x = x - x.max(axis, keepdims=True)
    e = np.exp(x)
    return e / e.sum(axis, keepdims=True)


def linear(x, w, b=None):  # PyTorch layout: w is [out, in]
    y = x @ w.T
    return y if b is None else y + b


class Twin:
    def __init__(self, tensors, meta):
        self.t = {k: v.astype(np.float64) for k, v in tensors.items()}
        self.cfg = json.loads(meta["tsa"])["config"]

    def attention(self, i, x):
        t, cfg = self.t, self.cfg
        B, T, d = x.shape
        H = cfg["n_heads"]
        hd = d // H
        qkv = linear(x, t[f"blocks.{i}.attn.qkv.weight"])
        heads = lambda m: m.reshape(B, T, H, hd).transpose(0, 2, 1, 3)
        q, k, v = heads(qkv[..., :d]), heads(qkv[..., d : 2 * d]), heads(qkv[..., 2 * d :])
        scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(hd)
        future = np.triu(np.ones((T, T), dtype=bool), 1)
        scores = np.where(future, -np.inf, scores)
        y = (softmax(scores) @ v).transpose(0, 2, 1, 3).reshape(B, T, d)
        return linear(y, t[f"blocks.{i}.attn.proj.weight"])

    def ffn(self, i, x):
        t = self.t
        h = gelu(linear(x, t[f"blocks.{i}.ffn.fc.weight"], t[f"blocks.{i}.ffn.fc.bias"]))
        return linear(h, t[f"blocks.{i}.ffn.proj.weight"], t[f"blocks.{i}.ffn.proj.bias"])

    def block(self, i, h, g):
        t = self.t
        h = h + g * self.attention(i, layer_norm(h, t[f"blocks.{i}.ln_attn.weight"], t[f"blocks.{i}.ln_attn.bias"]))
        return h + g * self.ffn(i, layer_norm(h, t[f"blocks.{i}.ln_ffn.weight"], t[f"blocks.{i}.ln_ffn.bias"]))

    def router(self, l, h):
        t = self.t
        z = relu(linear(h, t[f"routers.{l}.fc.weight"], t[f"routers.{l}.fc.bias"]))
        z = linear(z, t[f"routers.{l}.out.weight"], t[f"routers.{l}.out.bias"])[..., 0]
        return 1.0 / (1.0 + np.exp(-z))

    def forward(self, tokens):
        """Soft execution (tsa-core's `Execution::Soft`): logits [B, T, V] and p per router."""
        t, cfg = self.t, self.cfg
        tokens = np.asarray(tokens)
        T = tokens.shape[1]
        h = t["tok_emb.weight"][tokens] + t["pos_emb"][:T]
        h = self.block(0, h, 1.0)
        routing = cfg["routing"]
        halting = []
        for l in range(cfg["n_layers"] - 1):
            g = 1.0
            if routing["kind"] == "tsa":
                p = self.router(l, h)
                halting.append(p)
                gate = routing.get("gate", {"kind": "soft"})["kind"]
                # The soft gate 1 − p; hard gates evaluate as the inference rule (p ≤ 0.5 runs).
                kept = (p <= HALT_THRESHOLD).astype(np.float64)
                g = {"soft": 1.0 - p, "straight_through_scaled": kept * (1.0 - p)}.get(gate, kept)[..., None]
            elif routing["kind"] != "dense":
                raise SystemExit(f"the twin covers dense and TSA models, not {routing['kind']}")
            h = self.block(l + 1, h, g)
        h = layer_norm(h, t["ln_f.weight"], t["ln_f.bias"])
        return h @ t["tok_emb.weight"].T, halting


def relu(x):
    return np.maximum(x, 0.0)


def cross_entropy(logits, targets):
    logp = logits - logits.max(-1, keepdims=True)
    logp = logp - np.log(np.exp(logp).sum(-1, keepdims=True))
    return float(-np.take_along_axis(logp, np.asarray(targets)[..., None], -1).mean())


def check(model_path, expected_path, tol=1e-4):
    twin = Twin(*load_safetensors(model_path))
    with open(expected_path) as f:
        want = json.load(f)
    logits, halting = twin.forward(want["tokens"])
    diffs = {
        "logits": float(np.abs(logits.ravel() - np.asarray(want["logits"])).max()),
        "loss": abs(cross_entropy(logits, want["targets"]) - want["loss"]),
    }
    if len(halting) != len(want["halting"]):
        print(f"{len(halting)} routers here, {len(want['halting'])} in tsa-core")
        return 1
    for l, (p, q) in enumerate(zip(halting, want["halting"])):
        diffs[f"p{l}"] = float(np.abs(p.ravel() - np.asarray(q)).max())
    worst = max(diffs.values())
    print(f"{model_path}: max |twin − tsa-core| = {worst:.2e} ({', '.join(f'{k} {v:.1e}' for k, v in diffs.items())})")
    return 0 if worst <= tol else 1


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] != "check":
        raise SystemExit(__doc__)
    sys.exit(check(sys.argv[2], sys.argv[3]))
