#!/usr/bin/env python3
"""Gradient parity: loads DIR/m.safetensors and DIR/grads.json written by
`cargo run --release -p tsa-core --example parity_grads -- DIR [tsa]`, recomputes the loss's
gradients in the PyTorch twin (float64) and prints the largest relative difference per tensor.
Needs torch (not run in CI). Measured: 2.6e-7 (dense), 1.0e-6 (soft TSA)."""
import json
import sys

import numpy as np
import torch
sys.path.insert(0, __import__('os').path.dirname(__file__))
from safetensors.torch import load_file
from safetensors import safe_open
import torch_twin as tt
d = sys.argv[1]
w = load_file(f'{d}/m.safetensors')
with safe_open(f'{d}/m.safetensors', 'pt') as f: meta = json.loads(f.metadata()['tsa'])
c = meta['config']
routing = {'kind': c['routing']['kind'], 'gate': 'soft'}
m = tt.Twin(c['vocab_size'], c['d_model'], c['n_layers'], c['n_heads'], c['d_ff'], c['context'], 0.0, routing).double()
names = {}
for i, b in enumerate(m.blocks):
    names.update({f'blocks.{i}.ln_attn.weight': b.ln_attn.weight, f'blocks.{i}.ln_attn.bias': b.ln_attn.bias,
                  f'blocks.{i}.ln_ffn.weight': b.ln_ffn.weight, f'blocks.{i}.ln_ffn.bias': b.ln_ffn.bias,
                  f'blocks.{i}.attn.qkv.weight': b.qkv.weight, f'blocks.{i}.attn.proj.weight': b.attn_proj.weight,
                  f'blocks.{i}.ffn.fc.weight': b.fc.weight, f'blocks.{i}.ffn.fc.bias': b.fc.bias,
                  f'blocks.{i}.ffn.proj.weight': b.ffn_proj.weight, f'blocks.{i}.ffn.proj.bias': b.ffn_proj.bias})
for l, r in enumerate(m.routers):
    names.update({f'routers.{l}.fc.weight': r.fc.weight, f'routers.{l}.fc.bias': r.fc.bias, f'routers.{l}.out.weight': r.out.weight, f'routers.{l}.out.bias': r.out.bias})
names.update({'tok_emb.weight': m.tok_emb.weight, 'pos_emb': m.pos_emb, 'ln_f.weight': m.ln_f.weight, 'ln_f.bias': m.ln_f.bias})
with torch.no_grad():
    for k, p in names.items(): p.copy_(w[k].double())
g = json.load(open(f'{d}/grads.json'))
T = c['context']
x = torch.tensor(g['tokens']).view(-1, T); y = torch.tensor(g['targets']).view(-1, T)
m.eval()
logits, _, _ = m(x)
loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
loss.backward()
ours = g['grads']
worst = 0
for k, p in names.items():
    bk = k.replace('ln_attn.weight','ln_attn.gamma').replace('ln_attn.bias','ln_attn.beta').replace('ln_ffn.weight','ln_ffn.gamma').replace('ln_ffn.bias','ln_ffn.beta').replace('ln_f.weight','ln_f.gamma').replace('ln_f.bias','ln_f.beta')
    if bk not in ours: print('missing', bk); continue
    o = np.array(ours[bk]['g']).reshape(ours[bk]['dims'])
    t = p.grad.numpy()
    if o.ndim == 2 and k not in ('tok_emb.weight', 'pos_emb'): o = o.T
    rel = np.abs(o - t).max() / (np.abs(t).max() + 1e-12)
    worst = max(worst, rel)
    if rel > 1e-3: print(f'{k}: rel diff {rel:.2e}  |t| {np.abs(t).max():.2e}')
print('worst relative gradient difference', worst)

# One optimiser step (quick recipe at step 0: lr 2e-3, clipping 1.0, AdamW β=(0.9, 0.95), weight
# decay 0.1 on matrices but not embeddings), compared with tsa-core's step in DIR/m1.safetensors.
import os
if os.path.exists(f'{d}/m1.safetensors'):
    w1 = load_file(f'{d}/m1.safetensors')
    decay = [p for k, p in names.items() if p.dim() >= 2 and 'emb' not in k]
    rest = [p for k, p in names.items() if not (p.dim() >= 2 and 'emb' not in k)]
    torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
    opt = torch.optim.AdamW([{'params': decay, 'weight_decay': 0.1}, {'params': rest, 'weight_decay': 0.0}],
                            lr=2e-3, betas=(0.9, 0.95), eps=1e-8)
    opt.step()
    worst = 0
    for k, p in names.items():
        t = p.detach().numpy()
        o = w1[k].double().numpy()
        moved = np.abs(t - w[k].double().numpy()).max()
        diff = np.abs(o - t).max()
        worst = max(worst, diff / (moved + 1e-12))
        if diff > 0.05 * moved + 1e-9:
            print(f'{k}: after one step differs by {diff:.2e} (the step moved it by {moved:.2e})')
    print('worst difference after one step, relative to the step', worst)
    # 100 more steps on the same batches as tsa-core (lr as the quick recipe's cosine over 600).
    if os.path.exists(f'{d}/steps.json'):
        st = json.load(open(f'{d}/steps.json'))
        ours_l, theirs_l = st['losses'], []
        for s, (xs, ys) in enumerate(st['batches'], start=1):
            for g in opt.param_groups:
                g['lr'] = 2e-3 * (0.1 + 0.45 * (1 + np.cos(np.pi * s / 600)))
            lg, _, _ = m(torch.tensor(xs).view(-1, T))
            loss = torch.nn.functional.cross_entropy(lg.reshape(-1, lg.shape[-1]), torch.tensor(ys).view(-1))
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
            opt.step()
            theirs_l.append(loss.item())
        for s in (0, 9, 24, 49, 74, 99):
            print(f'step {s + 2}: tsa-core {ours_l[s]:.5f}  PyTorch {theirs_l[s]:.5f}')
