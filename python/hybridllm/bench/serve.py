"""`hybridllm bench serve`: online serving benchmark against any OpenAI-compatible server.

Synthetic prompts of --input-len tokens, --output-len output tokens each (ignore_eos), always
streamed; Poisson arrivals at --request-rate (or all at once for inf) under --max-concurrency,
which may be a comma list to sweep. Reports throughput, TTFT/TPOT/ITL/E2E percentiles and the
client's own CPU share, so a saturated client is visible rather than mistaken for the server.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import sys
import time
import urllib.request

from hybridllm.bench.metrics import PERCENTILES, CpuMeter, RequestResult, poisson_arrivals
from hybridllm.bench.metrics import summarize as summarize_results

BATCHING_TARGET = 4.0  # output tokens/s at concurrency 16 over concurrency 1
ENDPOINTS = ["/v1/chat/completions", "/v1/completions", "/v1/responses"]


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("serve", help="Online serving benchmark (OpenAI-compatible API).")
    add_load_args(parser)
    parser.add_argument("--base-url", default=None, help="e.g. http://127.0.0.1:8000")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--endpoint", default="/v1/chat/completions", choices=ENDPOINTS)
    parser.add_argument("--compare-endpoint", default=None, choices=ENDPOINTS,
                        help="Also send the same prompts here, alternating rounds with "
                             "--endpoint, and print the two side by side (e.g. /v1/responses "
                             "against /v1/chat/completions).")
    parser.add_argument("--rounds", type=int, default=1,
                        help="Alternating rounds per endpoint with --compare-endpoint "
                             "(medians are reported).")
    parser.add_argument("--model", default=None, help="Served name (default: first of /v1/models).")
    parser.add_argument("--api-key", default=None)
    parser.add_argument("--result-json", default=None)
    parser.add_argument("--plot", default=None, help="PNG of a --max-concurrency sweep.")
    parser.set_defaults(func=run)


def add_load_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--num-prompts", type=int, default=200, help="Requests per level.")
    parser.add_argument("--request-rate", type=float, default=float("inf"),
                        help="Poisson arrival rate in requests/s (default inf: all at once).")
    parser.add_argument("--max-concurrency", default=None,
                        help="In-flight request cap; a comma list sweeps, e.g. 1,4,16,64.")
    parser.add_argument("--input-len", type=int, default=128)
    parser.add_argument("--output-len", type=int, default=128)
    parser.add_argument("--tokenizer", default=None,
                        help="Model folder or tokenizer.json (default: the bundled model's).")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--ignore-eos", action=argparse.BooleanOptionalAction, default=True,
                        help="Send vLLM's ignore_eos so every request yields --output-len tokens.")
    parser.add_argument("--disable-tqdm", action="store_true")
    parser.add_argument("--http-client", choices=["aiohttp", "raw", "native"],
                        default="aiohttp",
                        help="raw: minimal HTTP/1.1 on asyncio streams (less client CPU); "
                             "native: the package's Rust client, hybridllm-loadgen (least).")


def concurrency_levels(spec: str | None) -> list[int | None]:
    if not spec:
        return [None]
    return [int(x) for x in spec.split(",") if x.strip()]


def first_model(base_url: str, api_key: str | None) -> str:
    req = urllib.request.Request(base_url + "/v1/models")
    if api_key:
        req.add_header("Authorization", f"Bearer {api_key}")
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.load(resp)["data"][0]["id"]


async def _drive(url: str, payloads: list[bytes], arrivals: list[float],
                 concurrency: int | None, api_key: str | None, progress: bool,
                 meter: CpuMeter, client: str = "aiohttp",
                 ) -> tuple[list[RequestResult], float, dict]:
    from tqdm import tqdm

    from hybridllm.bench.client import make_session, send_request

    limit = concurrency or len(payloads)
    async with make_session(limit, api_key, client, url) as session:
        test = await send_request(session, url, payloads[0])  # warm-up, also a sanity check
        if not test.success:
            raise SystemExit(f"bench: test request failed: {test.error}")
        sem = asyncio.Semaphore(limit)
        bar = tqdm(total=len(payloads), disable=not progress, file=sys.stderr, leave=False)

        async def one(payload: bytes, at: float, t0: float) -> RequestResult:
            delay = t0 + at - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            async with sem:
                res = await send_request(session, url, payload)
            bar.update(1)
            return res

        # Payloads, tokenizer and the last level's results are long-lived: keep the garbage
        # collector's full passes off them while the load runs.
        gc.collect()
        gc.freeze()
        meter.start()
        t0 = time.perf_counter()
        results = await asyncio.gather(*(one(p, a, t0) for p, a in zip(payloads, arrivals)))
        duration = time.perf_counter() - t0
        cpu = meter.stop()
        bar.close()
    return list(results), duration, cpu


def run_level(url: str, payloads: list[bytes], rate: float, concurrency: int | None, seed: int,
              api_key: str | None = None, progress: bool = True,
              pids: dict[str, list[int]] | None = None, client: str = "aiohttp") -> dict:
    """One load level; the summary dict (also what --result-json stores per level)."""
    arrivals = poisson_arrivals(len(payloads), rate, seed)
    meter = CpuMeter(pids)
    if client == "native":
        from hybridllm.bench.native import run_native

        results, duration, cpu = run_native(url, payloads, arrivals, concurrency, api_key,
                                            meter)
    else:
        results, duration, cpu = asyncio.run(
            _drive(url, payloads, arrivals, concurrency, api_key, progress, meter, client))
    summary = summarize_results(results, duration)
    return {"max_concurrency": concurrency, "request_rate": rate,
            "num_prompts": len(payloads)} | summary | {"cpu": cpu}


def print_summary(s: dict, title: str = "Serving Benchmark Result") -> None:
    w = 50
    print(f"{' ' + title + ' ':=^{w}}")
    conc = s["max_concurrency"] or "unlimited"
    rows = [("Maximum request concurrency", conc), ("Request rate (req/s)", s["request_rate"]),
            ("Successful requests", s["completed"]), ("Failed requests", s["failed"]),
            ("Benchmark duration (s)", f"{s['duration_s']:.2f}"),
            ("Total input tokens", s["total_input_tokens"]),
            ("Total generated tokens", s["total_output_tokens"]),
            ("Request throughput (req/s)", f"{s['request_throughput']:.2f}"),
            ("Output token throughput (tok/s)", f"{s['output_throughput']:.2f}"),
            ("Total token throughput (tok/s)", f"{s['total_token_throughput']:.2f}")]
    for k, v in rows:
        print(f"{k + ':':<40}{v:>10}")
    for key, name in (("ttft_ms", "Time to First Token"), ("tpot_ms", "Time per Output Token"),
                      ("itl_ms", "Inter-token Latency"), ("e2el_ms", "End-to-end Latency")):
        print(f"{' ' + name + ' ':-^{w}}")
        st = s[key]
        print(f"{'Mean (ms):':<40}{st['mean']:>10.2f}")
        for p in PERCENTILES:
            print(f"{f'P{p} (ms):':<40}{st[f'p{p}']:>10.2f}")
    cpu = s["cpu"]
    print(f"{' CPU ':-^{w}}")
    print(f"{'Client CPU (cores busy)':<40}{cpu['client_cpu_share']:>10.2f}")
    print(f"{'Client CPU (fraction of machine)':<40}{cpu['client_machine_fraction']:>10.1%}")
    print(f"{'Machine busy (all processes)':<40}{cpu['machine_busy_fraction']:>10.1%}")
    for k, v in cpu.items():
        if k.endswith("_cpu_share") and k != "client_cpu_share":
            print(f"{k[:-10] + ' CPU (cores busy)':<40}{v:>10.2f}")
    for err, n in s["errors"].items():
        print(f"  error x{n}: {err}")
    print("=" * w, flush=True)


def print_sweep(runs: list[dict]) -> None:
    print(f"{'conc':>6} {'req/s':>8} {'out tok/s':>10} {'TTFT p50':>9} {'p99':>8} "
          f"{'TPOT p50':>9} {'p99':>8} {'client CPU':>10}")
    for r in runs:
        print(f"{r['max_concurrency'] or '-':>6} {r['request_throughput']:>8.2f} "
              f"{r['output_throughput']:>10.1f} {r['ttft_ms']['p50']:>9.1f} "
              f"{r['ttft_ms']['p99']:>8.1f} {r['tpot_ms']['p50']:>9.1f} "
              f"{r['tpot_ms']['p99']:>8.1f} {r['cpu']['client_cpu_share']:>10.2f}")


def batching_verdict(runs: list[dict]) -> dict | None:
    """Continuous batching: output tokens/s at concurrency 16 vs 1, when both were run."""
    by = {r["max_concurrency"]: r["output_throughput"] for r in runs}
    if 1 not in by or 16 not in by or not by[1]:
        return None
    ratio = by[16] / by[1]
    met = ratio >= BATCHING_TARGET
    print(f"continuous batching: {by[16]:.1f} tok/s at concurrency 16 vs {by[1]:.1f} at 1 = "
          f"{ratio:.2f}x (target >= {BATCHING_TARGET:.0f}x: {'MET' if met else 'NOT MET'})")
    return {"ratio_c16_c1": ratio, "target": BATCHING_TARGET, "met": met}


def make_payloads(args: argparse.Namespace, model: str,
                  endpoint: str | None = None) -> list[bytes]:
    from hybridllm.bench.client import build_payload
    from hybridllm.bench.datasets import load_tokenizer, random_prompts

    prompts = random_prompts(load_tokenizer(args.tokenizer), args.num_prompts, args.input_len,
                             args.seed)
    return [build_payload(endpoint or args.endpoint, model, p, args.output_len,
                          args.ignore_eos) for p in prompts]


def sweep(args: argparse.Namespace, base_url: str, model: str,
          pids: dict[str, list[int]] | None = None) -> list[dict]:
    payloads = make_payloads(args, model)
    runs = []
    for conc in concurrency_levels(args.max_concurrency):
        s = run_level(base_url + args.endpoint, payloads, args.request_rate, conc, args.seed,
                      getattr(args, "api_key", None), not args.disable_tqdm, pids,
                      args.http_client)
        print_summary(s)
        runs.append(s)
    return runs


def run(args: argparse.Namespace) -> int:
    base_url = (args.base_url or f"http://{args.host}:{args.port}").rstrip("/")
    model = args.model or first_model(base_url, args.api_key)
    print(f"bench serve: {base_url}{args.endpoint} model={model} prompts={args.num_prompts} "
          f"input={args.input_len} output={args.output_len} rate={args.request_rate}", flush=True)
    if args.compare_endpoint:
        from hybridllm.bench.endpoint_compare import compare

        endpoints = [args.endpoint, args.compare_endpoint]
        payloads = {e: make_payloads(args, model, e) for e in endpoints}
        rows = compare(endpoints, concurrency_levels(args.max_concurrency), args.rounds,
                       lambda e, conc: run_level(base_url + e, payloads[e], args.request_rate,
                                                 conc, args.seed, args.api_key,
                                                 not args.disable_tqdm, None, args.http_client))
        if args.result_json:
            with open(args.result_json, "w") as f:
                json.dump({"compare": rows}, f, indent=2, default=str)
        return 0 if all(r[e]["failed"] == 0 for r in rows for e in
                        (args.endpoint, args.compare_endpoint)) else 1
    runs = sweep(args, base_url, model)
    if len(runs) > 1:
        print_sweep(runs)
    verdict = batching_verdict(runs)
    if args.plot and len(runs) > 1:
        from hybridllm.bench.plot import plot_sweep

        plot_sweep(runs, args.plot, f"{model} {args.endpoint} in={args.input_len} "
                                    f"out={args.output_len}")
        print(f"plot: {args.plot}")
    if args.result_json:
        config = {k: v for k, v in vars(args).items() if k != "func"}
        config["model"] = model
        with open(args.result_json, "w") as f:
            json.dump({"config": config, "runs": runs, "batching": verdict}, f, indent=2,
                      default=str)
    return 0 if all(r["failed"] == 0 for r in runs) else 1
