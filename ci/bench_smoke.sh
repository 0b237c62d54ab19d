#!/usr/bin/env bash
# Small versions of the serving benchmarks (about 1-2 minutes): `bench serve` (chat, then
# /v1/responses against chat) and `bench batching` against the real bundled model behind the
# Rust frontend, then `bench
# frontend-overhead` (Rust vs Python frontend, mock engine), then `bench embed` (offline
# embeddings vs sentence-transformers, 64 sentences; served /v1/embeddings, Rust vs Python,
# mock pooling runner and real model), then `bench beam` (offline beam search vs n=4
# sampling), then `bench structured` (JSON-schema constrained vs unconstrained decode steps).
# Figures are printed against their
# targets; timings never fail this script, only crashes and failed requests do.
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(mktemp -d /tmp/hybridllm-bench-smoke.XXXXXX)
port=$(python -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
url=http://127.0.0.1:$port

echo "-- hybridllm serve --rust-frontend (bundled model) on $url"
hybridllm serve --rust-frontend --host 127.0.0.1 --port "$port" >"$out/server.log" 2>&1 &
server=$!
trap 'kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true' EXIT
for _ in $(seq 360); do
  if curl -sf "$url/v1/models" >/dev/null; then break; fi
  if ! kill -0 "$server" 2>/dev/null; then cat "$out/server.log"; exit 1; fi
  sleep 0.5
done
curl -sf "$url/v1/models" >/dev/null || { tail -n 30 "$out/server.log"; exit 1; }

echo "-- bench serve (real model, concurrency 1,4)"
hybridllm bench serve --base-url "$url" --num-prompts 8 --max-concurrency 1,4 \
  --input-len 32 --output-len 8 --disable-tqdm \
  --result-json "$out/serve.json" --plot "$out/serve.png" | tail -n 6

echo "-- bench serve /v1/responses vs /v1/chat/completions (real model, alternating rounds)"
hybridllm bench serve --base-url "$url" --endpoint /v1/responses \
  --compare-endpoint /v1/chat/completions --rounds 2 --num-prompts 8 --max-concurrency 4 \
  --input-len 32 --output-len 8 --http-client native --disable-tqdm | tail -n 4

echo "-- bench batching (real model, Rust frontend)"
hybridllm bench batching --base-url "$url" --max-concurrency 1,4,16 --min-prompts 4 \
  --prompts-per-slot 1 --input-len 32 --output-len 16 --disable-tqdm \
  --result-json "$out/batching.json" | tail -n 6
kill "$server"; wait "$server" 2>/dev/null || true
trap - EXIT

# The engine's host time per step (issue 19): 256 decode sequences, fake forward pass.
echo "-- bench engine-step (host time per step, 256 decode sequences, fake forward pass)"
hybridllm bench engine-step --warmup-steps 10 --steps 60 --runs 1 \
  --result-json "$out/engine_step.json" | tail -n 4
echo "-- bench frontend-overhead (mock engine, Rust vs Python frontend)"
hybridllm bench frontend-overhead --repeats 1 --concurrency 64 --requests-per-level 1024 \
  --baseline-requests 20 --disable-tqdm --result-json "$out/overhead.json" | tail -n 9
echo "-- bench embed (LLM.embed vs sentence-transformers, 64 sentences; served, Rust vs Python)"
hybridllm bench embed --num-sentences 64 --rounds 1 --serve-requests 400 \
  --serve-real-requests 32 --serve-rounds 1 --result-json "$out/embed.json" \
  | grep -v -e "Loading" -e "INFO"
echo "-- bench beam (offline: beam_width=4 vs n=4 sampling, ignore_eos, same prompts)"
hybridllm bench beam --num-prompts 4 --input-len 32 --output-len 16 --rounds 1 \
  --result-json "$out/beam.json" | grep -v -e "Loading" -e "INFO"
echo "-- bench structured (offline: JSON-schema constrained vs unconstrained steps, batch 8;"
echo "   compiles over JSONSchemaBench; served: TTFT added by a schema, Rust frontend)"
hybridllm bench structured --small --served --corpus tests/data/jsonschemabench \
  --result-json "$out/structured.json" \
  | grep -v -e "Loading" -e "INFO"
echo "bench smoke: results in $out"
