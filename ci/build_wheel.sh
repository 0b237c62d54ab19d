#!/usr/bin/env bash
# The wheel that ships: the extension module hybridllm._api and the two binaries
# (hybridllm-frontend, hybridllm-loadgen) in one, all with the fat-LTO `dist` profile.
# maturin builds the extension; the binaries go into the wheel's scripts (python/data/scripts,
# installed beside the interpreter). Usage: ci/build_wheel.sh [OUT_DIR] (default: dist/);
# HYBRIDLLM_WHEEL_PROFILE=release builds the same wheel with the faster-to-build profile.
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE=${HYBRIDLLM_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/hybridllm}
VENV=${HYBRIDLLM_VENV:-$CACHE/venv}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$CACHE/cargo-target}
OUT=${1:-dist}
PROFILE=${HYBRIDLLM_WHEEL_PROFILE:-dist}
cargo build --profile "$PROFILE" -p hybridllm-frontend --bins
for bin in hybridllm-frontend hybridllm-loadgen; do
  install -m 755 "$CARGO_TARGET_DIR/$PROFILE/$bin" "python/data/scripts/$bin"
done
"$VENV/bin/python" -m maturin build --profile "$PROFILE" --out "$OUT"
