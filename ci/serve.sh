#!/usr/bin/env bash
# Installs what is missing, then serves the bundled default model with the Rust frontend on
# http://127.0.0.1:8000 (extra arguments go to `hybridllm serve`).
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/setup.sh
CACHE=${HYBRIDLLM_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/hybridllm}
VENV=${HYBRIDLLM_VENV:-$CACHE/venv}
exec "$VENV/bin/hybridllm" serve --rust-frontend "$@"
