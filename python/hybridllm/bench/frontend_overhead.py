"""`hybridllm bench frontend-overhead`: Rust vs Python frontend over the same mock engine.

Starts both servers (mock engine: the real scheduler, KV manager, engine loop, gRPC and HTTP,
a fixed wait for the forward pass, overlapped by output handling as on a GPU) on free ports,
then alternates load levels between them (--repeats rounds, medians reported) so drift in
the machine's other load hits both alike.
Each level is a closed loop: --max-concurrency streams in flight, request rate inf, streamed
chat completions of --output-len tokens; requests/s at that level is the maximum it sustains.
Concurrency 1 gives the per-request path cost: TTFT p50 minus one engine step.

On a small machine the client, the frontend and the worker share the cores: the CPU each
process used is printed, so the figures say which one saturated.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics

from hybridllm.bench.serve import make_payloads, run_level

SPEEDUP_TARGET = 5.0  # Rust requests/s over Python's
TTFT_ADDED_TARGET_MS = 2.0  # Rust TTFT p50 over the mock step


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("frontend-overhead", help="Rust vs Python frontend on the mock engine.")
    p.add_argument("--frontends", default="rust,python",
                   help="Of rust, python (engine in-process, what `hybridllm serve` runs), "
                        "python-grpc (Python frontend over the gRPC worker, like Rust).")
    p.add_argument("--concurrency", default="64,256", help="Comma list of levels.")
    p.add_argument("--requests-per-level", type=int, default=4096,
                   help="Long enough to measure the sustained rate: a closed loop ramps up and "
                        "drains for about one request latency at each end, a sizeable share "
                        "of a run of a few hundred ms.")
    p.add_argument("--baseline-requests", type=int, default=100,
                   help="Requests at concurrency 1 (0 skips the baseline).")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--mock-step-ms", type=float, default=1.0,
                   help="Engine step time. A closed loop of C requests of N tokens can never "
                        "exceed C / (N x step): keep that ceiling (printed) far above what "
                        "the frontends reach, or the figure measures the mock engine.")
    p.add_argument("--input-len", type=int, default=32)
    p.add_argument("--output-len", type=int, default=16)
    p.add_argument("--engine-args", default="", help="Extra engine flags for both servers.")
    p.add_argument("--tokenizer", default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--disable-tqdm", action="store_true")
    p.add_argument("--http-client", choices=["aiohttp", "raw", "native"], default="native",
                   help="native (default here): the package's Rust client, about 0.25 of a core "
                        "at 2,400 requests/s where the raw Python client takes 0.4 and slows "
                        "the frontends it shares the cores with.")
    p.add_argument("--result-json", default=None)
    p.set_defaults(func=run, endpoint="/v1/chat/completions", ignore_eos=True,
                   request_rate=float("inf"))


def _median(runs: list[dict], *path: str) -> float:
    vals = []
    for r in runs:
        v = r
        for k in path:
            v = v[k]
        vals.append(v)
    return statistics.median(vals)


def _verdict(ok: bool) -> str:
    return "MET" if ok else "NOT MET"


def run(args: argparse.Namespace) -> int:
    from hybridllm.bench.launch import start_server
    from hybridllm.bench.serve import first_model

    kinds = [k.strip() for k in args.frontends.split(",") if k.strip()]
    levels = [int(c) for c in args.concurrency.split(",")]
    if args.baseline_requests:
        levels = [1, *levels]
    flags = ["--mock-engine", "--mock-step-ms", str(args.mock_step_ms),
             *shlex.split(args.engine_args)]
    servers = {}
    try:
        for kind in kinds:
            print(f"starting {kind} frontend (mock engine, step {args.mock_step_ms} ms)...",
                  flush=True)
            servers[kind] = start_server(kind, flags)
            print(f"  {servers[kind].base_url} pids {servers[kind].pids}", flush=True)
        model = first_model(servers[kinds[0]].base_url, None)
        args.num_prompts = max(args.requests_per_level, args.baseline_requests)
        payloads = make_payloads(args, model)
        runs: dict[tuple[str, int], list[dict]] = {}
        for rep in range(args.repeats):
            for conc in levels:
                n = args.baseline_requests if conc == 1 else args.requests_per_level
                for kind in kinds if rep % 2 == 0 else kinds[::-1]:
                    s = servers[kind]
                    r = run_level(s.base_url + args.endpoint, payloads[:n], float("inf"), conc,
                                  args.seed, None, not args.disable_tqdm, s.pids,
                                  args.http_client)
                    runs.setdefault((kind, conc), []).append(r)
                    cpu = " ".join(f"{k[:-10]}={v:.2f}" for k, v in r["cpu"].items()
                                   if k.endswith("_cpu_share"))
                    print(f"round {rep + 1} {kind:>6} c={conc:<4} {r['request_throughput']:8.1f}"
                          f" req/s  TTFT p50 {r['ttft_ms']['p50']:7.1f} p99 "
                          f"{r['ttft_ms']['p99']:7.1f} ms  failed {r['failed']}  cores: {cpu}  "
                          f"machine busy {r['cpu']['machine_busy_fraction']:.0%}", flush=True)
    finally:
        for s in servers.values():
            s.stop()
    alone = (_engine_alone(args, runs, levels, shlex.split(args.engine_args))
             if "rust" in kinds else {})
    summary = report(runs, kinds, levels, args.mock_step_ms, args.output_len, alone)
    if args.result_json:
        with open(args.result_json, "w") as f:
            json.dump({"config": {k: v for k, v in vars(args).items() if k != "func"},
                       "summary": summary,
                       "runs": {f"{k}@{c}": v for (k, c), v in runs.items()}}, f, indent=2,
                      default=str)
    failed = sum(r["failed"] for rs in runs.values() for r in rs)
    return 1 if failed else 0


def _engine_alone(args: argparse.Namespace, runs: dict[tuple[str, int], list[dict]],
                  levels: list[int], engine_flags: list[str]) -> dict[int, dict]:
    """The same levels on the mock engine alone, prompts as long as the Rust runs' were."""
    from hybridllm.bench.engine_alone import measure

    rust = [r for (kind, _), rs in runs.items() if kind == "rust" for r in rs]
    prompt_len = round(statistics.median(r["total_input_tokens"] / max(r["completed"], 1)
                                         for r in rust))
    counts = {c: args.baseline_requests if c == 1 else args.requests_per_level for c in levels}
    print(f"engine alone (in-process, {prompt_len}-token prompts)...", flush=True)
    return measure(args.mock_step_ms, engine_flags, counts, prompt_len, args.output_len)


def report(runs: dict[tuple[str, int], list[dict]], kinds: list[str], levels: list[int],
           step_ms: float, output_len: int, alone: dict[int, dict] | None = None) -> dict:
    """Medians over rounds, each figure against its target."""
    print(f"\n== frontend overhead (mock engine, step {step_ms} ms; medians of "
          f"{len(next(iter(runs.values())))} rounds)")
    for conc in levels:
        ceiling = conc / (output_len * step_ms / 1000.0) if step_ms > 0 else float("inf")
        print(f"engine ceiling at concurrency {conc}: {ceiling:.0f} req/s "
              f"({conc} / ({output_len} tokens x {step_ms} ms))")
    print(f"{'frontend':>11} {'conc':>5} {'req/s':>8} {'TTFT p50':>9} {'p99':>8} "
          f"{'p50-step':>9} {'client':>7} {'frontend':>9} {'worker':>7} {'server':>7} "
          f"{'fe ms/req':>9}")
    summary: dict = {}
    for conc in levels:
        for kind in kinds:
            rs = runs[(kind, conc)]
            row = {"req_s": _median(rs, "request_throughput"),
                   "ttft_p50_ms": _median(rs, "ttft_ms", "p50"),
                   "ttft_p99_ms": _median(rs, "ttft_ms", "p99")}
            row["ttft_added_ms"] = row["ttft_p50_ms"] - step_ms
            cores = {k[:-10]: statistics.median(r["cpu"][k] for r in rs)
                     for k in rs[0]["cpu"] if k.endswith("_cpu_share")}
            row["cores"] = cores
            # CPU of the HTTP side per request (the whole server for in-process Python).
            fe = cores.get("frontend", cores.get("server", 0.0))
            row["frontend_cpu_ms_per_req"] = 1000.0 * fe / row["req_s"] if row["req_s"] else 0
            summary[f"{kind}@{conc}"] = row
            cells = " ".join(f"{cores.get(k, float('nan')):>{w}.2f}" for k, w in
                             (("client", 7), ("frontend", 9), ("worker", 7), ("server", 7)))
            print(f"{kind:>11} {conc:>5} {row['req_s']:>8.1f} {row['ttft_p50_ms']:>9.2f} "
                  f"{row['ttft_p99_ms']:>8.2f} {row['ttft_added_ms']:>9.2f} {cells} "
                  f"{row['frontend_cpu_ms_per_req']:>9.2f}")
    print("(cores: CPU seconds per wall second of each process during the level)")
    if "rust" in kinds:
        for conc in levels:
            added = summary[f"rust@{conc}"]["ttft_added_ms"]
            note = "" if conc == 1 else " (includes waiting for the step in flight: up to 1 step)"
            print(f"Rust TTFT p50 over the {step_ms} ms step at concurrency {conc}: {added:.2f} ms "
                  f"(target <= {TTFT_ADDED_TARGET_MS:.0f} ms: "
                  f"{_verdict(added <= TTFT_ADDED_TARGET_MS)}){note}")
        for conc, own in (alone or {}).items():
            summary[f"engine-alone@{conc}"] = own
            added = summary[f"rust@{conc}"]["ttft_p50_ms"] - own["ttft_p50_ms"]
            print(f"Rust TTFT p50 over the engine alone's at concurrency {conc}: {added:.2f} ms "
                  f"(target <= {TTFT_ADDED_TARGET_MS:.0f} ms: "
                  f"{_verdict(added <= TTFT_ADDED_TARGET_MS)}); engine alone: "
                  f"{own['req_s']:.1f} req/s, TTFT p50 {own['ttft_p50_ms']:.2f} ms")
    for other in kinds:
        if other == "rust" or "rust" not in kinds:
            continue
        for conc in levels:
            if conc == 1:
                continue
            ours, theirs = summary[f"rust@{conc}"], summary[f"{other}@{conc}"]
            ratio = ours["req_s"] / max(theirs["req_s"], 1e-9)
            summary[f"speedup_vs_{other}@{conc}"] = ratio
            target = (f"target >= {SPEEDUP_TARGET:.0f}x: {_verdict(ratio >= SPEEDUP_TARGET)}"
                      if other == "python" else "for information")
            cpu = theirs["frontend_cpu_ms_per_req"] / max(ours["frontend_cpu_ms_per_req"], 1e-9)
            print(f"Rust / {other} requests/s at concurrency {conc}: {ratio:.2f}x ({target}); "
                  f"{other} HTTP side CPU per request {cpu:.1f}x Rust's")
    return summary
