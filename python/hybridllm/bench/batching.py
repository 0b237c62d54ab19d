"""`hybridllm bench batching`: the real model on this machine behind the Rust frontend, swept
over concurrency 1, 4, 16, 64: output tokens/s, TTFT and TPOT per level, and continuous
batching's gain (tokens/s at concurrency 16 over concurrency 1) against its target.

Starts `hybridllm serve --rust-frontend` itself on a free port (or uses --base-url), and
stops it afterwards. Each level sends max(--min-prompts, --prompts-per-slot x concurrency)
streamed chat completions with the same prompts.
"""

from __future__ import annotations

import argparse
import json
import shlex

from hybridllm.bench.serve import (
    batching_verdict,
    first_model,
    make_payloads,
    print_summary,
    print_sweep,
    run_level,
)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("batching", help="Real model, Rust frontend: concurrency sweep.")
    p.add_argument("--model", default=None, help="Model for the server (default: bundled).")
    p.add_argument("--base-url", default=None, help="Use a running server instead.")
    p.add_argument("--max-concurrency", default="1,4,16,64")
    p.add_argument("--min-prompts", type=int, default=8)
    p.add_argument("--prompts-per-slot", type=int, default=2)
    p.add_argument("--input-len", type=int, default=128)
    p.add_argument("--output-len", type=int, default=64)
    p.add_argument("--engine-args", default="", help="Extra flags for hybridllm serve.")
    p.add_argument("--tokenizer", default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--disable-tqdm", action="store_true")
    p.add_argument("--result-json", default=None)
    p.add_argument("--plot", default=None)
    p.set_defaults(func=run, endpoint="/v1/chat/completions", ignore_eos=True,
                   request_rate=float("inf"))


def run(args: argparse.Namespace) -> int:
    from hybridllm.bench.launch import start_server

    levels = [int(c) for c in args.max_concurrency.split(",")]
    server = None
    pids = None
    try:
        if args.base_url:
            base_url = args.base_url.rstrip("/")
        else:
            flags = ([args.model] if args.model else []) + shlex.split(args.engine_args)
            print("starting hybridllm serve --rust-frontend (real model)...", flush=True)
            server = start_server("rust", flags)
            base_url, pids = server.base_url, server.pids
        model = first_model(base_url, None)
        args.num_prompts = max(args.min_prompts, args.prompts_per_slot * max(levels))
        payloads = make_payloads(args, model)
        runs = []
        for conc in levels:
            n = max(args.min_prompts, args.prompts_per_slot * conc)
            s = run_level(base_url + args.endpoint, payloads[:n], float("inf"), conc,
                          args.seed, None, not args.disable_tqdm, pids)
            print_summary(s, f"concurrency {conc}")
            runs.append(s)
    finally:
        if server is not None:
            server.stop()
    print_sweep(runs)
    verdict = batching_verdict(runs)
    if args.plot:
        from hybridllm.bench.plot import plot_sweep

        plot_sweep(runs, args.plot, f"{model} on CPU, Rust frontend, in={args.input_len} "
                                    f"out={args.output_len}")
        print(f"plot: {args.plot}")
    if args.result_json:
        with open(args.result_json, "w") as f:
            json.dump({"config": {k: v for k, v in vars(args).items() if k != "func"},
                       "runs": runs, "batching": verdict}, f, indent=2, default=str)
    return 0 if all(r["failed"] == 0 for r in runs) else 1
