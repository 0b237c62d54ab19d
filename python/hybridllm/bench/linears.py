"""`hybridllm bench linears`: the model's CPU linears (fp32 or bf16) through the panel kernel
against oneDNN, per row count.

Every projection and the LM head of the loaded model (each with its own weight, so each call
streams its weight from memory as a decode step does), one call each per pass, the two paths
alternating pass by pass; medians of `--passes`. Prints the CPU's SIMD flags and torch threads.
A SiLU MLP's gate_up packed with SiLU-and-mul in its epilogue (cpu_linear.PackedSiluMulLinear,
AVX-512 builds) has no plain linear to race and is left out: 91 of the default model's 121.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("linears", help="CPU linears: panel kernel vs oneDNN per row count.")
    parser.add_argument("--model", default=None)
    parser.add_argument("--rows", default="1,5,8,16,32,64")
    parser.add_argument("--passes", type=int, default=15)
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads.")
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    parser.add_argument("--result-json", default=None)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import torch

    from hybridllm import LLM
    from hybridllm.bench.spec import cpu_flags
    from hybridllm.kernels import linear_cpu
    from hybridllm.models.cpu_linear import PackedLinear

    if args.threads:
        torch.set_num_threads(args.threads)
    llm = LLM(model=args.model, dtype=args.dtype)
    layers = [m for m in llm.engine.runner.model.modules()
              if isinstance(m, PackedLinear) and m.panels is not None]
    if not layers:
        print("no panel-packed linears (not on CPU, or the kernel did not build)")
        return 1
    # A decoder keeps no oneDNN copy (cpu_linear.ALL_ROWS): one is made here to race.
    onednn_weights = [
        m.packed if m.packed is not None
        else linear_cpu.unpack(m.panels, m.out_features, m.in_features).contiguous().to_mkldnn()
        for m in layers
    ]
    dtype = getattr(torch, args.dtype)
    megabytes = sum(m.in_features * m.out_features for m in layers) * dtype.itemsize / 1e6
    print(f"CPU flags: {cpu_flags()}; torch threads {torch.get_num_threads()}; {args.dtype}; "
          f"{len(layers)} linears, {megabytes:.0f} MB of weights", flush=True)

    def one_pass(rows: int, path: str) -> float:
        inputs = [torch.randn(rows, m.in_features).to(dtype) for m in layers]
        start = time.perf_counter()
        with torch.inference_mode():
            for m, w, x in zip(layers, onednn_weights, inputs):
                if path == "panels":
                    linear_cpu.linear(x, m.panels, m.out_features, m.bias)
                else:
                    torch.ops.mkldnn._linear_pointwise(x, w, m.bias, "none", [], "")
        return time.perf_counter() - start

    results = []
    print(f"{'rows':>5} {'panels ms':>10} {'oneDNN ms':>10} {'oneDNN/panels':>14}")
    for rows in (int(r) for r in args.rows.split(",")):
        times: dict[str, list[float]] = {"panels": [], "onednn": []}
        for i in range(args.passes):
            for path in ("panels", "onednn") if i % 2 else ("onednn", "panels"):
                times[path].append(one_pass(rows, path))
        panels, onednn = (1000 * statistics.median(times[p]) for p in ("panels", "onednn"))
        results.append({"rows": rows, "panels_ms": panels, "onednn_ms": onednn})
        print(f"{rows:>5} {panels:>10.1f} {onednn:>10.1f} {onednn / panels:>13.2f}x", flush=True)
    if args.result_json:
        with open(args.result_json, "w", encoding="utf-8") as f:
            json.dump({"cpu_flags": cpu_flags(), "dtype": args.dtype, "rows": results}, f,
                      indent=2)
    return 0
