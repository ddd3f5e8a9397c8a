# Sourced by scripts/test and scripts/demo: installs what the project needs, idempotently.
set -euo pipefail

# One persistent target dir: a warm machine reuses the Burn build (tens of minutes clean).
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/cache/tsa-target}"
mkdir -p "$CARGO_TARGET_DIR"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"

need_apt=()
# Mesa's lavapipe: a Vulkan device for the native wgpu test on machines without a GPU.
dpkg -s mesa-vulkan-drivers >/dev/null 2>&1 || need_apt+=(mesa-vulkan-drivers libvulkan1)
# Chromium (WebGPU via SwiftShader) and its driver: browser tests of the web app.
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
command -v chromedriver >/dev/null 2>&1 || need_apt+=(chromium-driver)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "setup: apt-get install ${need_apt[*]}"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}"
fi

rustup target list --installed | grep -q '^wasm32-unknown-unknown$' || rustup target add wasm32-unknown-unknown

# Web tooling, exact versions: trunk only uses a wasm-bindgen whose version matches the crate's pin.
export PATH="$HOME/.cargo/bin:$PWD/node_modules/.bin:$PATH"
trunk --version 2>/dev/null | grep -q '0\.22\.1' ||
  cargo install trunk --version 0.22.1 --locked --ignore-rust-version
wasm-bindgen --version 2>/dev/null | grep -q '0\.2\.130' ||
  cargo install wasm-bindgen-cli --version 0.2.130
# wasm-opt from npm binaryen 132 (Debian's 108 emits a module Chromium rejects) and playwright-core.
if ! { [ -x node_modules/.bin/wasm-opt ] && [ -d node_modules/playwright-core ]; }; then
  npm install --no-audit --no-fund
fi

# NumPy for the parity test's twin (tests/parity/twin.py); PyTorch is not needed in CI.
python3 -c 'import numpy' 2>/dev/null || python3 -m pip install -q --disable-pip-version-check numpy

# Tiny-Shakespeare is not committed: copy it from ../shared/data or download it, then verify.
TSA_DATA_DIR="${TSA_DATA_DIR:-$PWD/data}"
export TSA_CORPUS="$TSA_DATA_DIR/tinyshakespeare.txt"
SHA=86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed
if ! echo "$SHA  $TSA_CORPUS" | sha256sum -c --status 2>/dev/null; then
  mkdir -p "$TSA_DATA_DIR"
  if [ -f ../shared/data/tinyshakespeare.txt ]; then
    cp ../shared/data/tinyshakespeare.txt "$TSA_CORPUS"
  else
    curl -fsSL -o "$TSA_CORPUS" https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt
  fi
  echo "$SHA  $TSA_CORPUS" | sha256sum -c --status || { echo "setup: tinyshakespeare.txt has the wrong sha256" >&2; exit 1; }
fi
