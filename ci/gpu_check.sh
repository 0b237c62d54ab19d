#!/usr/bin/env bash
# GPU check (one CUDA GPU, no network, under 8 minutes): the kernel tests on the device
# (real bf16 shapes, no interpreter), then the decode benchmark with and without CUDA graphs.
# Run from the repository root; PYTHON is the venv's python.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
unset TRITON_INTERPRET
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"

"$PY" - <<'PYEOF'
import torch, triton
assert torch.cuda.is_available(), "gpu_check: no CUDA device visible"
print(f"gpu_check: {torch.cuda.get_device_name(0)}, torch {torch.__version__}, "
      f"triton {triton.__version__}")
PYEOF

echo "== kernel tests on CUDA"
start=$SECONDS
timeout 300 "$PY" -m pytest tests/kernels -q -rs -p no:cacheprovider
echo "kernel tests: $((SECONDS - start)) s"

echo "== decode benchmark, CUDA graphs"
timeout 150 "$PY" bench/decode_gpu.py --batch-sizes 1,16,64,256 --context 512
echo "== decode benchmark, eager"
timeout 90 "$PY" bench/decode_gpu.py --batch-sizes 1,64 --context 512 --enforce-eager --iters 20
echo "gpu_check: done in $SECONDS s"
