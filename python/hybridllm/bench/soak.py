"""`hybridllm bench soak`: rounds of many concurrent streaming requests against a server on
the mock engine, watching for leaks. Round 0 warms up and sets the baseline; after each later
round every request must have completed with the asked token count, the memory of the
frontend and of the worker must stay within --rss-tolerance of the baseline (or the floor:
the Rust frontend's live heap, --heap-floor-mib; the worker's resident memory,
--rss-floor-mib), their open file descriptors within --fd-tolerance of it, and the server's log must
hold no warning of a leaked task. Prints one line per round and the verdict; exit status 1
when anything failed."""

from __future__ import annotations

import argparse
import json
import os
import re
import time

# What asyncio prints when a task or coroutine was leaked. (Not a bare "leak": triton's
# nanobind reports its own bindings as "leaked" when the interpreter exits.)
LEAK_WARNINGS = re.compile(r"Task was destroyed but it is pending|was never awaited|"
                           r"Task exception was never retrieved")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("soak", help="Rounds of concurrent streams on the mock engine; leak "
                                    "checks (memory, file descriptors, tasks).")
    p.add_argument("--frontend", choices=["rust", "python", "python-grpc"], default="rust")
    p.add_argument("--rounds", type=int, default=10, help="Measured rounds after the warm-up.")
    p.add_argument("--requests", type=int, default=1000, help="Concurrent requests per round.")
    p.add_argument("--input-len", type=int, default=32)
    p.add_argument("--output-len", type=int, default=16)
    p.add_argument("--mock-step-ms", type=float, default=1.0)
    p.add_argument("--rss-tolerance", type=float, default=0.05,
                   help="Allowed growth of memory over the baseline, as a fraction...")
    p.add_argument("--rss-floor-mib", type=float, default=8.0,
                   help="...or this many MiB of resident memory, whichever is larger.")
    p.add_argument("--heap-floor-mib", type=float, default=1.0,
                   help="The floor for a process that reports its live heap (the Rust "
                        "frontend's process_heap_allocated_bytes): exact, so tight.")
    p.add_argument("--fd-tolerance", type=int, default=16)
    p.add_argument("--result-json", default=None)
    p.set_defaults(func=run)


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


def _fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def heap_kib(base_url: str) -> int | None:
    """The Rust frontend's live heap (`process_heap_allocated_bytes`, served with
    HYBRIDLLM_HEAP_STATS=1), None where /metrics has no such family (the Python fallback)."""
    import urllib.request

    with urllib.request.urlopen(base_url + "/metrics", timeout=10) as r:
        text = r.read().decode()
    for line in text.splitlines():
        if line.startswith("process_heap_allocated_bytes "):
            return int(float(line.split()[1])) // 1024
    return None


def sample(pids: dict[str, list[int]]) -> dict[str, dict[str, int]]:
    """RSS (KiB) and open fds per role, summed over its processes."""
    return {role: {"rss_kib": sum(_rss_kib(p) for p in ps), "fds": sum(_fds(p) for p in ps)}
            for role, ps in pids.items() if ps and role != "supervisor"}


def settled(pids: dict[str, list[int]], samples: int = 5, gap_s: float = 0.25) -> dict:
    """After a round: five samples 0.25 s apart once the last hang-ups had a second. RSS is
    the smallest (memory still held when idle, not a free the allocator has yet to hand
    back), the fd count the last."""
    time.sleep(1.0)
    seen = []
    for _ in range(samples):
        seen.append(sample(pids))
        time.sleep(gap_s)
    return {role: {"rss_kib": min(s[role]["rss_kib"] for s in seen),
                   "fds": seen[-1][role]["fds"]} for role in seen[-1]}


def run(args: argparse.Namespace) -> int:
    from hybridllm.bench.client import build_payload
    from hybridllm.bench.datasets import load_tokenizer, random_prompts
    from hybridllm.bench.launch import start_server
    from hybridllm.bench.serve import run_level

    flags = ["--mock-engine", "--mock-step-ms", str(args.mock_step_ms), "--max-model-len",
             "512", "--max-num-seqs", str(max(256, args.requests))]
    prompts = random_prompts(load_tokenizer(None), args.requests, args.input_len, seed=0)
    payloads = [build_payload("/v1/chat/completions", "SmolLM2-135M-Instruct", p,
                              args.output_len, True) for p in prompts]
    # The Rust frontend counts its live heap (process_heap_allocated_bytes) only when asked.
    os.environ.setdefault("HYBRIDLLM_HEAP_STATS", "1")
    server = start_server(args.frontend, flags)
    rows, problems = [], []
    try:
        client = "native" if args.frontend == "rust" else "raw"
        for r in range(args.rounds + 1):
            s = run_level(server.base_url + "/v1/chat/completions", payloads, float("inf"),
                          args.requests, 0, None, False, None, client)
            now = settled(server.pids)
            heap = heap_kib(server.base_url)
            if heap is not None:
                now["frontend"]["heap_kib"] = heap
            row = {"round": r, "completed": s["completed"], "failed": s["failed"],
                   "output_tokens": s["total_output_tokens"], "duration_s": s["duration_s"],
                   **{f"{k}_{m}": v[m] for k, v in now.items() for m in v}}
            rows.append(row)
            if s["completed"] != args.requests or s["total_output_tokens"] != (
                    args.requests * args.output_len):
                problems.append(f"round {r}: {s['completed']} completed, "
                                f"{s['total_output_tokens']} tokens, errors {s['errors']}")
            if r > 0:
                problems += _leaks(rows[0], row, now, args)
            print(_line(row), flush=True)
    finally:
        server.stop()
    with open(server.log_path, errors="replace") as f:
        warnings = [line.strip() for line in f if LEAK_WARNINGS.search(line)]
    problems += [f"log: {w}" for w in warnings[:5]]
    ok = not problems
    print(f"soak ({args.frontend}, {args.requests} concurrent streams x {args.rounds} rounds "
          f"after a warm-up): {'PASSED' if ok else 'FAILED'}", flush=True)
    for p in problems:
        print("  " + p)
    if args.result_json:
        with open(args.result_json, "w") as f:
            json.dump({"rounds": rows, "problems": problems}, f, indent=2)
    return 0 if ok else 1


def _leaks(base: dict, row: dict, now: dict, args: argparse.Namespace) -> list[str]:
    out = []
    for role in now:
        # A process that counts its live heap is judged on it: its RSS also holds the
        # allocator's partly used pages, which wander by more than a leak would add.
        kind = "heap" if f"{role}_heap_kib" in row else "rss"
        floor = args.heap_floor_mib if kind == "heap" else args.rss_floor_mib
        mem0, mem = base[f"{role}_{kind}_kib"], row[f"{role}_{kind}_kib"]
        allowed = max(mem0 * args.rss_tolerance, floor * 1024)
        if mem > mem0 + allowed:
            label = "RSS" if kind == "rss" else "heap"
            out.append(f"round {row['round']}: {role} {label} {mem} KiB > baseline {mem0} KiB "
                       f"+ {allowed:.0f} KiB")
        fd0, fd = base[f"{role}_fds"], row[f"{role}_fds"]
        if abs(fd - fd0) > args.fd_tolerance:
            out.append(f"round {row['round']}: {role} {fd} open fds, baseline {fd0} "
                       f"± {args.fd_tolerance}")
    return out


def _line(row: dict) -> str:
    mem = "  ".join(f"{k[:-8]} RSS {v / 1024:.1f} MiB" for k, v in row.items()
                    if k.endswith("_rss_kib"))
    mem += "".join(f"  {k[:-9]} heap {v / 1024:.2f} MiB" for k, v in row.items()
                   if k.endswith("_heap_kib"))
    fds = "  ".join(f"{k[:-4]} fds {v}" for k, v in row.items() if k.endswith("_fds"))
    tag = "warm-up" if row["round"] == 0 else f"round {row['round']}"
    return (f"{tag:>8}: {row['completed']} ok, {row['failed']} failed, "
            f"{row['output_tokens']} tokens in {row['duration_s']:.2f} s  {mem}  {fds}")
