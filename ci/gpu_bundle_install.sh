# Sourced by ci/gpu_check.sh: install the folder made by ci/gpu_bundle.sh into this machine's
# Python ($PY) and this checkout, with no network, and export where things are:
#   - the wheels (no dependencies resolved: the bundle is the closure the image lacks);
#   - the gRPC stubs into python/hybridllm/proto/, the API core's extension module beside them;
#   - HYBRIDLLM_RUST_FRONTEND_PATH and HYBRIDLLM_LOADGEN_PATH to the bundled binaries;
#   - HYBRIDLLM_CACHE_DIR (default $DIR/cache) holding the default model with random weights
#     made by transformers from the bundled config (seed 0), so every test and script that
#     resolves the default model finds it.
# Arguments: BUNDLE_DIR. Needs PY and DIR set by the caller.
gpu_bundle_install() {
  local bundle=$1 model
  [ -d "$bundle/wheels" ] || { echo "gpu_bundle_install: no bundle at $bundle" >&2; return 1; }
  bundle=$(cd "$bundle" && pwd)
  PIP_BREAK_SYSTEM_PACKAGES=1 "$PY" -m pip install -q --no-index --no-deps \
    "$bundle"/wheels/*.whl || return 1
  mkdir -p python/hybridllm/proto
  cp "$bundle"/proto/* python/hybridllm/proto/
  touch python/hybridllm/proto/__init__.py
  cp "$bundle"/ext/* python/hybridllm/
  chmod +x "$bundle"/bin/*
  export HYBRIDLLM_RUST_FRONTEND_PATH=$bundle/bin/hybridllm-frontend
  export HYBRIDLLM_LOADGEN_PATH=$bundle/bin/hybridllm-loadgen
  export HYBRIDLLM_CACHE_DIR=${HYBRIDLLM_CACHE_DIR:-$DIR/cache}
  model=$HYBRIDLLM_CACHE_DIR/models/SmolLM2-135M-Instruct
  if [ ! -f "$model/model.safetensors" ]; then
    mkdir -p "$model"
    cp "$bundle"/model/* "$model/"
    "$PY" - "$model" <<'PY' || return 1
import sys

import torch
from transformers import AutoConfig, AutoModelForCausalLM

folder = sys.argv[1]
torch.manual_seed(0)
model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(folder), dtype=torch.float32)
model.save_pretrained(folder)
print(f"gpu_bundle_install: random weights (seed 0) for {folder}")
PY
  fi
  echo "gpu_bundle_install: $(ls "$bundle"/wheels | wc -l) wheels, binaries and stubs from" \
    "$bundle; default model at $model"
}
