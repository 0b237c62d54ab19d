"""`hybridllm bench serve --compare-endpoint`: the same prompts sent to two endpoints of one
server in alternating rounds (A B A B ...), so both see the same machine state; prints the
medians of requests/s and TTFT p50 per endpoint and their ratio against the target (the
Responses API within 5 % of chat completions)."""

from __future__ import annotations

import statistics
from collections.abc import Callable

TOLERANCE = 0.05  # /v1/responses vs /v1/chat/completions: requests/s and TTFT within 5 %


def compare(endpoints: list[str], levels: list[int | None], rounds: int,
            run_one: Callable[[str, int | None], dict]) -> list[dict]:
    """Per concurrency level, `rounds` alternating runs of `run_one(endpoint, concurrency)`
    (a `run_level` summary) on each endpoint; the medians, printed with their ratio."""
    rows = []
    for conc in levels:
        runs: dict[str, list[dict]] = {e: [] for e in endpoints}
        for _ in range(rounds):
            for e in endpoints:
                runs[e].append(run_one(e, conc))
        row: dict = {"max_concurrency": conc, "rounds": rounds}
        for e in endpoints:
            row[e] = {"request_throughput": statistics.median(
                          r["request_throughput"] for r in runs[e]),
                      "ttft_p50_ms": statistics.median(r["ttft_ms"]["p50"] for r in runs[e]),
                      "output_tokens": sum(r["total_output_tokens"] for r in runs[e]),
                      "failed": sum(r["failed"] for r in runs[e])}
        rows.append(row)
        print_row(row, *endpoints)
    return rows


def print_row(row: dict, a: str, b: str) -> None:
    ra, rb = row[a], row[b]
    rps = ra["request_throughput"] / rb["request_throughput"]
    ttft = ra["ttft_p50_ms"] / rb["ttft_p50_ms"]
    met = rps >= 1 - TOLERANCE and ttft <= 1 + TOLERANCE
    print(f"concurrency {row['max_concurrency'] or 'unlimited'}, median of {row['rounds']} "
          f"alternating rounds:")
    for e, r in ((a, ra), (b, rb)):
        print(f"  {e:<24} {r['request_throughput']:>9.2f} req/s  TTFT p50 "
              f"{r['ttft_p50_ms']:>8.2f} ms  ({r['output_tokens']} output tokens, "
              f"{r['failed']} failed)")
    print(f"  {a} / {b}: req/s {rps:.3f}x, TTFT p50 {ttft:.3f}x (target: req/s >= "
          f"{1 - TOLERANCE:.2f}x and TTFT <= {1 + TOLERANCE:.2f}x: {'MET' if met else 'NOT MET'})",
          flush=True)
    row["ratio"] = {"request_throughput": rps, "ttft_p50": ttft, "met": met}
