#!/usr/bin/env bash
# GPU check (one CUDA GPU, no network, under 8 minutes), written so that one run gives every
# figure: each section has its own time limit and a failure does not stop the later ones.
#   1. the 1B dummy decode benchmark with CUDA graphs at batch 1/16/64/256, at kernel level
#      (graph replay + LM head) and through the engine's ModelRunner.execute (host work and
#      sampler included), with the batch-1 fraction of the memory-bandwidth roofline (>= 60%);
#      then eager at batch 1/64 for comparison;
#   2. greedy parity of the engine on CUDA against transformers on the default model
#      (fp32 exact, with CUDA graphs, eager mixed steps and preemption; bf16 match fraction;
#      seeded sampling batch independence) — tests/worker_cuda/cuda_parity.py;
#   3. serving (ci/gpu_serve.sh): the 1B shape served by the Rust frontend and the Python
#      fallback, `bench serve` at concurrency 1/16/64/256 against the serving targets;
#   4. the kernel and worker tests on CUDA (real bf16 shapes, no interpreter, graphs captured).
# Run from anywhere; PYTHON is the python to use (torch, triton, transformers). On a stock
# image with no network, first make the bundle here (bash ci/gpu_bundle.sh) and send the
# gpu_bundle/ folder with the checkout: it is installed before the first section
# (ci/gpu_bundle_install.sh; GPU_BUNDLE names another folder). With $OUT set, a summary goes
# to $OUT/gpu_check.txt (full log beside it).
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
unset TRITON_INTERPRET
export PYTHONPATH="$PWD/python:$PWD${PYTHONPATH:+:$PYTHONPATH}"
PEAK_BW=${PEAK_BW:-}  # bytes/s; default from the device name (H100 SXM 3.35e12, H200 4.8e12)
DIR=${OUT:-$(mktemp -d)}
mkdir -p "$DIR"
LOG="$DIR/gpu_check.log"
SUMMARY="$DIR/gpu_check.txt"
: >"$LOG"
: >"$SUMMARY.sections"
failed=0

summarize() {
  {
    echo "gpu_check summary ($(date -u +%FT%TZ), ${SECONDS} s)"
    grep -E '^(gpu_check:|decode bench:|runner bench:|batch |runner batch |parity:|serve:)' "$LOG"
    grep -E '^(FAILED|ERROR) |^=+ .*(passed|failed|error)|^[A-Za-z.]*(Error|Exception):' "$LOG"
    cat "$SUMMARY.sections"
    echo "gpu_check: $([ "$failed" = 0 ] && echo PASS || echo FAIL)"
  } >"$SUMMARY"
  rm -f "$SUMMARY.sections"
  [ -n "${OUT:-}" ] || cat "$SUMMARY"
}
trap summarize EXIT

# section NAME LIMIT_S CMD...: run with a time limit, log it, record rc and duration.
section() {
  local name=$1 limit=$2 start=$SECONDS rc
  shift 2
  echo "== $name (limit ${limit} s)" | tee -a "$LOG"
  timeout --kill-after=10 "$limit" "$@" 2>&1 | tee -a "$LOG"
  rc=${PIPESTATUS[0]}
  [ "$rc" = 0 ] || failed=1
  echo "section $name: rc=$rc ($([ "$rc" = 124 ] && echo 'TIMED OUT, ')$((SECONDS - start)) s)" \
    | tee -a "$SUMMARY.sections"
}

BUNDLE=${GPU_BUNDLE:-gpu_bundle}
if [ -d "$BUNDLE" ]; then
  # shellcheck source=ci/gpu_bundle_install.sh
  . ci/gpu_bundle_install.sh
  # Not in a pipeline: its exports must reach this shell.
  gpu_bundle_install "$BUNDLE" >"$DIR/bundle.log" 2>&1
  rc=$?
  tee -a "$LOG" <"$DIR/bundle.log"
  [ "$rc" = 0 ] || { echo "gpu_check: the bundle did not install" | tee -a "$LOG"; exit 1; }
fi

"$PY" - 2>&1 <<'PYEOF' | tee -a "$LOG"
import torch, triton
assert torch.cuda.is_available(), "gpu_check: no CUDA device visible"
print(f"gpu_check: {torch.cuda.get_device_name(0)}, torch {torch.__version__}, "
      f"triton {triton.__version__}")
PYEOF
if [ -z "$PEAK_BW" ]; then
  case "$(grep -m1 '^gpu_check:' "$LOG")" in
    *H200*) PEAK_BW=4.8e12 ;;
    *H100*) PEAK_BW=3.35e12 ;;
    *) PEAK_BW=4.8e12 ;;
  esac
fi
echo "gpu_check: roofline peak bandwidth ${PEAK_BW} B/s" | tee -a "$LOG"

BENCH=(bench/decode_gpu.py --context 512 --peak-bw "$PEAK_BW")
section "decode bench, CUDA graphs" 100 "$PY" "${BENCH[@]}" --batch-sizes 1,16,64,256
section "engine-step bench, CUDA graphs" 100 "$PY" "${BENCH[@]}" --batch-sizes 1,16,64,256 \
  --runner --iters 30
section "decode bench, eager" 40 "$PY" "${BENCH[@]}" --batch-sizes 1,64 --enforce-eager --iters 10
section "greedy parity vs transformers" 150 "$PY" tests/worker_cuda/cuda_parity.py
section "serving, Rust frontend and Python fallback" 150 env PYTHON="$PY" OUT="$DIR" \
  bash ci/gpu_serve.sh
# Whatever time is left (at least 60 s) for the tests; the sm_90 AOT compile test is for
# machines without a GPU and is skipped here.
left=$((470 - SECONDS))
section "kernel + worker tests on CUDA" $((left > 60 ? left : 60)) "$PY" -m pytest -q -rs \
  -p no:cacheprovider tests/kernels tests/worker_cuda --deselect \
  tests/kernels/test_compile_sm90.py::test_all_kernels_compile_for_sm90
echo "gpu_check: done in $SECONDS s"
exit "$failed"
