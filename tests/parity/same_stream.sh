#!/usr/bin/env bash
# tsa-core and the PyTorch twin trained from the same initial weights on the same batch stream
# (quick recipe): their validation curves side by side. Everything random is then shared, so the
# curves must agree closely; a gap of more than 0.03 nats is a bug.
#
#   tests/parity/same_stream.sh [dense|tsa ...]      (default: dense tsa; output under results/parity)
#
# Installs PyTorch into a virtual environment ($TORCH_VENV, default /var/cache/torch-venv) if it
# is not there: ~3 GB from PyPI (its CUDA libraries included), a minute or two here.
set -euo pipefail
cd "$(dirname "$0")/../.."
VENV=${TORCH_VENV:-/var/cache/torch-venv}
if ! "$VENV/bin/python" -c 'import torch, safetensors' 2>/dev/null; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check torch numpy safetensors
fi
PY="$VENV/bin/python"
CORPUS=${TSA_CORPUS:-data/tinyshakespeare.txt}
[ -f "$CORPUS" ] || CORPUS=../shared/data/tinyshakespeare.txt
OUT=results/parity
mkdir -p "$OUT"
cargo build --release -q -p native-bench
NB=${CARGO_TARGET_DIR:-target}/release/native-bench
for r in "${@:-dense tsa}"; do
  for routing in $r; do
    # The twin draws the initial weights (seed 1337) and stops after one step; tsa-core starts
    # from them and records its windows; the twin then trains on those windows.
    "$PY" tests/parity/torch_twin.py train --recipe quick --routing "$routing" --steps 1 \
      --corpus "$CORPUS" --export-init "$OUT/init-$routing.safetensors" > /dev/null
    "$NB" train --recipe quick --routing "$routing" --device cpu --corpus "$CORPUS" \
      --init-from "$OUT/init-$routing.safetensors" --windows-out "$OUT/windows-$routing.json" \
      --out "$OUT/ours-$routing.tsa" --log "$OUT/ours-$routing.jsonl"
    "$PY" tests/parity/torch_twin.py train --recipe quick --routing "$routing" --corpus "$CORPUS" \
      --init-from "$OUT/init-$routing.safetensors" --windows "$OUT/windows-$routing.json" \
      --log "$OUT/torch-$routing.jsonl"
    echo "== $routing: tsa-core vs PyTorch, same initial weights, same windows"
    "$PY" tests/parity/torch_twin.py compare "$OUT/ours-$routing.jsonl" "$OUT/torch-$routing.jsonl"
  done
done
