#!/usr/bin/env bash
# Serving stage of ci/gpu_check.sh (issue 19's serving targets). The 1B Llama shape of
# configs/llama-1b-dummy.json with random weights (--load-format dummy, bf16), its vocabulary
# cut to the bundled tokenizer's 49,152 ids so that every sampled id has text; served by the
# Rust frontend, then by the Python fallback; `bench serve` with the native load generator,
# 128 tokens in and 128 out (ignore_eos). Prints `serve:` lines against the targets:
# concurrency 1 TTFT p50 <= 4 ms, concurrency 256 >= 70k output tok/s (Rust frontend).
# Environment: PYTHON (default python3), OUT (results folder), SERVE_CONCURRENCY (default
# 1,16,64,256), SERVE_MIN_PROMPTS (requests per level: 4 per in-flight slot, at least this,
# default 32), SERVE_DEVICE (default cuda;
# cpu with a small SERVE_CONFIG checks the script itself on any machine).
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
DIR=${OUT:-$(mktemp -d)}
CONC=${SERVE_CONCURRENCY:-1,16,64,256}
MIN_PROMPTS=${SERVE_MIN_PROMPTS:-32}
CONFIG=${SERVE_CONFIG:-configs/llama-1b-dummy.json}
DEVICE=${SERVE_DEVICE:-cuda}
export PYTHONPATH="$PWD/python:$PWD${PYTHONPATH:+:$PYTHONPATH}"
folder=$DIR/serve-model
mkdir -p "$folder"
"$PY" - "$CONFIG" "$folder" <<'PY' || exit 1
import json
import shutil
import sys
from pathlib import Path

from hybridllm.models.resolve import resolve_model

config_path, folder = sys.argv[1], Path(sys.argv[2])
tok = resolve_model(None)
config = json.loads(Path(config_path).read_text())
vocab = json.loads((tok / "config.json").read_text())
for key in ("vocab_size", "bos_token_id", "eos_token_id"):
    config[key] = vocab[key]
(folder / "config.json").write_text(json.dumps(config, indent=2))
for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
    if (tok / name).exists():
        shutil.copy(tok / name, folder / name)
print(f"serve: model {config_path} with the vocabulary of {tok.name} ({config['vocab_size']})")
PY

port=$("$PY" -c "from hybridllm.distributed.parallel_state import free_port; print(free_port())")
failed=0

# run_frontend NAME LEVELS [serve flags...]: serve, wait, one bench per level (4 requests per
# in-flight slot, at least 32), stop; results in $DIR/NAME-c<level>.json.
run_frontend() {
  local name=$1 levels=$2 pid rc=0 conc
  shift 2
  "$PY" -m hybridllm.cli.main serve --model "$folder" --load-format dummy --device "$DEVICE" \
    --port "$port" --disable-log-requests --max-num-seqs 256 "$@" >"$DIR/serve-$name.log" 2>&1 &
  pid=$!
  for _ in $(seq 1 240); do
    curl -sf "http://127.0.0.1:$port/v1/models" >/dev/null && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.5
  done
  if curl -sf "http://127.0.0.1:$port/v1/models" >/dev/null; then
    for conc in ${levels//,/ }; do
      "$PY" -m hybridllm.cli.main bench serve --base-url "http://127.0.0.1:$port" \
        --max-concurrency "$conc" --num-prompts $((conc * 4 > MIN_PROMPTS ? conc * 4 : MIN_PROMPTS)) \
        --input-len 128 --output-len 128 --tokenizer "$folder" --http-client native \
        --disable-tqdm --result-json "$DIR/$name-c$conc.json" | grep -E "^(bench|Output token|Request thr)" \
        || rc=1
    done
  else
    echo "serve: the $name server did not come up; its log:"; tail -n 30 "$DIR/serve-$name.log"
    rc=1
  fi
  kill -TERM "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  [ "$rc" = 0 ] || failed=1
}

run_frontend rust "$CONC" --rust-frontend
run_frontend python "${CONC##*,}"

"$PY" - "$DIR" <<'PY'
import json
import sys
from pathlib import Path

out = Path(sys.argv[1])


def runs(name: str) -> dict:
    found = {}
    for path in out.glob(f"{name}-c*.json"):
        for r in json.loads(path.read_text())["runs"]:
            found[r["max_concurrency"]] = r
    return found


rust, python = runs("rust"), runs("python")
for conc, r in sorted(rust.items()):
    print(f"serve: rust c={conc}: {r['output_throughput']:.0f} output tok/s, "
          f"{r['request_throughput']:.1f} req/s, TTFT p50 {r['ttft_ms']['p50']:.2f} ms, "
          f"TPOT p50 {r['tpot_ms']['p50']:.2f} ms, ITL p50 {r['itl_ms']['p50']:.2f} ms "
          f"p99 {r['itl_ms']['p99']:.2f} ms")
for conc, r in sorted(python.items()):
    print(f"serve: python c={conc}: {r['output_throughput']:.0f} output tok/s, "
          f"TTFT p50 {r['ttft_ms']['p50']:.2f} ms")
if 1 in rust:
    t = rust[1]["ttft_ms"]["p50"]
    print(f"serve: rust c=1 TTFT p50 {t:.2f} ms (target <= 4 ms: {'MET' if t <= 4 else 'NOT MET'})")
if 256 in rust:
    tps = rust[256]["output_throughput"]
    print(f"serve: rust c=256 {tps:.0f} output tok/s (target >= 70000: "
          f"{'MET' if tps >= 70000 else 'NOT MET'})")
    if 256 in python:
        print(f"serve: rust / python output tok/s at c=256: "
              f"{tps / python[256]['output_throughput']:.2f}x")
PY
exit "$failed"
