#!/usr/bin/env bash
# Assemble the one folder that lets ci/gpu_check.sh run on a GPU machine with a stock CUDA +
# PyTorch image (Python 3.12 with torch, triton and transformers) and no network. Run it here
# after ci/setup.sh; send the folder (default gpu_bundle/, ignored by git) with the checkout,
# e.g. the device tool's `carry`, and ci/gpu_check.sh installs it before its first section.
#   wheels/  Python 3.12 manylinux wheels of what such an image lacks, at this venv's versions
#            (protobuf and grpcio at the versions the gRPC stubs were generated with)
#   bin/     hybridllm-frontend and hybridllm-loadgen as built here (release)
#   ext/     the API core's extension module (hybridllm._api, abi3: any CPython >= 3.10)
#   proto/   the generated gRPC stubs (python/hybridllm/proto/ is not committed)
#   model/   the default model's config, tokenizer and chat template, without weights:
#            ci/gpu_bundle_install.sh makes random ones there with transformers
# Usage: bash ci/gpu_bundle.sh [OUT_DIR]. Fails if the folder is over 60 MB.
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE=${HYBRIDLLM_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/hybridllm}
VENV=${HYBRIDLLM_VENV:-$CACHE/venv}
PY=$VENV/bin/python
OUT=${1:-gpu_bundle}
LIMIT_MB=60
# What the serving path imports beyond torch, triton, transformers and their dependencies;
# the wheels are these and everything they require, at this venv's versions.
ROOTS=(fastapi uvicorn grpcio protobuf prometheus-client msgspec orjson)

[ -x "$PY" ] || { echo "gpu_bundle: no venv at $VENV: run ci/setup.sh first" >&2; exit 1; }
rm -rf "$OUT"
mkdir -p "$OUT/wheels" "$OUT/bin" "$OUT/ext" "$OUT/proto" "$OUT/model"

"$PY" - "${ROOTS[@]}" >"$OUT/requirements.txt" <<'PY'
import importlib.metadata as md
import sys

from packaging.requirements import Requirement

pins: dict[str, str] = {}


def walk(name: str) -> None:
    dist = md.distribution(name)
    key = dist.metadata["Name"].lower().replace("_", "-")
    if key in pins:
        return
    pins[key] = dist.version
    for line in dist.requires or []:
        req = Requirement(line)
        if req.marker is None or req.marker.evaluate({"extra": ""}):
            walk(req.name)


for root in sys.argv[1:]:
    walk(root)
print("\n".join(f"{name}=={version}" for name, version in sorted(pins.items())))
PY
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp --abi cp312 --platform manylinux2014_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
  -r "$OUT/requirements.txt" -d "$OUT/wheels"
n_wheels=$(find "$OUT/wheels" -name '*.whl' | wc -l)
n_pins=$(wc -l <"$OUT/requirements.txt")
[ "$n_wheels" = "$n_pins" ] || { echo "gpu_bundle: $n_wheels wheels for $n_pins pins" >&2; exit 1; }

for bin in hybridllm-frontend hybridllm-loadgen; do
  cp "$VENV/bin/$bin" "$OUT/bin/"
done
cp python/hybridllm/proto/*.py python/hybridllm/proto/*.pyi "$OUT/proto/"
cp python/hybridllm/_api.abi3.so "$OUT/ext/"

model=$("$PY" -c "from hybridllm.models.resolve import resolve_model; print(resolve_model(None))")
find "$model" -maxdepth 1 -type f ! -name '*.safetensors' -exec cp {} "$OUT/model/" \;
[ -f "$OUT/model/config.json" ] && [ -f "$OUT/model/tokenizer.json" ] || {
  echo "gpu_bundle: $model lacks config.json or tokenizer.json" >&2; exit 1; }

size_mb=$(du -sm "$OUT" | cut -f1)
echo "gpu_bundle: $OUT, ${size_mb} MB (limit ${LIMIT_MB}): $n_wheels wheels," \
  "$(ls "$OUT/bin" | tr '\n' ' ')stubs, model files: $(ls "$OUT/model" | tr '\n' ' ')"
[ "$size_mb" -le "$LIMIT_MB" ] || { echo "gpu_bundle: over ${LIMIT_MB} MB" >&2; exit 1; }
