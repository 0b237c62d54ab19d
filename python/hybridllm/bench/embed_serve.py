"""Served embeddings: `/v1/embeddings`, one sentence per request, Rust frontend vs the Python
fallback at the same concurrency, same run (rounds alternate which goes first).

Against the mock pooling runner (no encoder compute, `--mock-engine`) the frontends and the
engine loop are what is measured, as in `bench frontend-overhead`; the real model's figure
follows for information (on a small CPU machine the encoder then sets the pace for both).
Requests are sent by the package's native load generator; the CPU each process used is
printed, so the figures say which one saturated.
"""

from __future__ import annotations

import json
import statistics
from typing import Any

from hybridllm.bench.launch import start_server
from hybridllm.bench.serve import run_level

TARGET_SPEEDUP = 3.0  # Rust requests/s over the Python fallback's, mock pooling runner
KINDS = ("rust", "python")


def _payloads(sentences: list[str]) -> list[bytes]:
    return [json.dumps({"input": s, "truncate_prompt_tokens": -1}).encode() for s in sentences]


def measure(model: str, sentences: list[str], concurrency: int, rounds: int,
            engine_flags: list[str], label: str) -> dict[str, Any]:
    """Medians over `rounds` of each frontend's requests/s and latency on `sentences`."""
    servers = {}
    runs: dict[str, list[dict]] = {k: [] for k in KINDS}
    try:
        for kind in KINDS:
            servers[kind] = start_server(kind, ["--model", model, *engine_flags])
        payloads = _payloads(sentences)
        for rep in range(rounds):
            for kind in KINDS if rep % 2 == 0 else KINDS[::-1]:
                s = servers[kind]
                r = run_level(s.base_url + "/v1/embeddings", payloads, float("inf"),
                              concurrency, rep, None, False, s.pids, "native")
                runs[kind].append(r)
                cpu = " ".join(f"{k[:-10]}={v:.2f}" for k, v in r["cpu"].items()
                               if k.endswith("_cpu_share"))
                print(f"{label} round {rep + 1} {kind:>6} c={concurrency} "
                      f"{r['request_throughput']:8.1f} req/s  latency p50 "
                      f"{r['e2el_ms']['p50']:7.2f} ms  failed {r['failed']}  cores: {cpu}",
                      flush=True)
    finally:
        for s in servers.values():
            s.stop()
    out: dict[str, Any] = {}
    for kind, rs in runs.items():
        out[kind] = {
            "req_s": statistics.median(r["request_throughput"] for r in rs),
            "latency_p50_ms": statistics.median(r["e2el_ms"]["p50"] for r in rs),
            "failed": sum(r["failed"] for r in rs),
        }
    out["speedup"] = out["rust"]["req_s"] / max(out["python"]["req_s"], 1e-9)
    return out


def report(mock: dict[str, Any] | None, real: dict[str, Any] | None, concurrency: int) -> None:
    print(f"\n== served /v1/embeddings, one sentence per request, concurrency {concurrency} "
          "(medians of rounds)")
    for label, res in (("mock pooling runner", mock), ("real model", real)):
        if res is None:
            continue
        for kind in KINDS:
            row = res[kind]
            print(f"{label:>20} {kind:>6}: {row['req_s']:8.1f} req/s  latency p50 "
                  f"{row['latency_p50_ms']:7.2f} ms  failed {row['failed']}")
    if mock is not None:
        ratio = mock["speedup"]
        verdict = "MET" if ratio >= TARGET_SPEEDUP else "NOT MET"
        print(f"Rust / Python fallback requests/s, mock pooling runner: {ratio:.2f}x "
              f"(target >= {TARGET_SPEEDUP:.0f}x: {verdict})")
    if real is not None:
        print(f"Rust / Python fallback requests/s, real model: {real['speedup']:.2f}x "
              "(for information)")
