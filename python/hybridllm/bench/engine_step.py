"""Host time of one engine step: `LLMEngine.step_requests()` with the real scheduler, the real
`ModelRunner` input preparation (`prepare`, the same code the CUDA path runs) and the real
sampler's bookkeeping around a fake forward pass that computes nothing, then the step's
outputs built as `AsyncLLMEngine` hands them over. Unlike `MockModelRunner` (which skips
preparation and sampling), everything the host does per step on a GPU runs here; only the
model's kernels are missing, so the figure is what the host adds to every GPU step.

N running decode sequences (greedy, ignore_eos) advance step after step: they grow, and with
staggered prompt lengths about N / block_size of them cross into a new KV block each step.
Prints the median host time per step over the timed steps (after warm-up) and its split:
schedule / prepare / sample / outputs (the engine's per-token bookkeeping) / hand-over
(`RequestOutput`s of the previous step, built while the next forward pass would run).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

TARGET_MS = 1.5  # per step at 256 sequences, on the 2-core CI machine (issue 19)
PARTS = ("schedule", "prepare", "sample", "outputs", "hand-over")


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "engine-step", help="Host time of an engine step around a fake forward pass."
    )
    parser.add_argument("--num-seqs", type=int, default=256)
    parser.add_argument("--prompt-len", type=int, default=100,
                        help="Shortest prompt; sequence i gets i %% block_size more tokens.")
    parser.add_argument("--warmup-steps", type=int, default=50)
    parser.add_argument("--steps", type=int, default=400, help="Timed decode steps per run.")
    parser.add_argument("--runs", type=int, default=3,
                        help="Independent runs (fresh engine each); the median run is reported.")
    parser.add_argument("--block-size", type=int, default=16)
    parser.add_argument("--result-json", default=None)
    parser.set_defaults(func=run)


class _Clock:
    """Seconds spent in each wrapped callable during the current step."""

    def __init__(self) -> None:
        self.spent: dict[str, float] = {}

    def wrap(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        perf = time.perf_counter
        spent = self.spent

        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = perf()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[name] = spent.get(name, 0.0) + perf() - t0

        return timed


def _build_engine(args: argparse.Namespace) -> Any:
    from hybridllm.config import EngineArgs
    from hybridllm.engine.llm_engine import LLMEngine
    from hybridllm.executor.fake_forward import FakeForwardRunner
    from hybridllm.sampling import build_sampler

    # Room for every sequence to the end of the run (and the steps of its prefill).
    tokens = args.num_seqs * (2 * args.prompt_len + args.block_size + args.warmup_steps
                              + args.steps)
    blocks = tokens // args.block_size + 2 * args.num_seqs + 64
    engine_args = EngineArgs(
        mock_engine=True, device="cpu", max_num_seqs=args.num_seqs,
        block_size=args.block_size, num_gpu_blocks_override=blocks,
        enable_prefix_caching=True,
    )
    engine = LLMEngine.from_engine_args(engine_args, detokenize=False)
    config = engine.config
    engine.runner = FakeForwardRunner(
        config, build_sampler(config.model, config.args.seed, config.device)
    )
    return engine


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """One run on a fresh engine: per-step medians of the total and of each part (ms)."""
    import torch

    from hybridllm.sampling_params import SamplingParams

    torch.set_num_threads(1)  # host work is single-threaded; keep torch's pool out of it
    engine = _build_engine(args)
    # None ends within the run: max_tokens is capped at what max_model_len leaves.
    params = SamplingParams(temperature=0.0, ignore_eos=True, max_tokens=1 << 20)
    for i in range(args.num_seqs):
        n = args.prompt_len + i % args.block_size
        engine.add_request(f"r{i}", [1000 + (i * 131 + j) % 30000 for j in range(n)], params)
    clock = _Clock()
    runner = engine.runner
    engine.scheduler.schedule = clock.wrap("schedule", engine.scheduler.schedule)
    runner.prepare = clock.wrap("prepare", runner.prepare)
    runner.sampler = clock.wrap("sample", runner.sampler)
    pending: list[Any] = []

    def hand_over() -> None:
        if pending:
            engine.make_outputs(pending.pop())

    timed_hand_over = clock.wrap("hand-over", hand_over)
    # Prefill (chunked under the token budget) until every sequence decodes.
    while any(s.num_computed_tokens < s.num_prompt_tokens
              for r in engine.requests.values() for s in r.seqs):
        pending.append(engine.step_requests(hand_over))
    totals: list[float] = []
    parts: dict[str, list[float]] = {p: [] for p in PARTS}
    for step in range(args.warmup_steps + args.steps):
        clock.spent.clear()
        t0 = time.perf_counter()
        touched = engine.step_requests(timed_hand_over)
        total = time.perf_counter() - t0
        pending.append(touched)
        if len(touched) != args.num_seqs:
            raise RuntimeError(f"step {step} touched {len(touched)} requests, "
                               f"not {args.num_seqs}: the batch is not steady")
        if step < args.warmup_steps:
            continue
        spent = clock.spent
        known = sum(spent.get(p, 0.0) for p in PARTS if p != "outputs")
        spent["outputs"] = total - known
        totals.append(total * 1e3)
        for p in PARTS:
            parts[p].append(spent.get(p, 0.0) * 1e3)
    return {"step_ms": statistics.median(totals),
            "parts_ms": {p: statistics.median(v) for p, v in parts.items()}}


def run(args: argparse.Namespace) -> int:
    results = [measure(args) for _ in range(args.runs)]
    results.sort(key=lambda r: r["step_ms"])
    best = results[len(results) // 2]
    print(f"engine step host time, {args.num_seqs} running decode sequences "
          f"({args.steps} timed steps after {args.warmup_steps} warm-up, "
          f"median of {args.runs} runs):")
    print(f"  per step: {best['step_ms']:.3f} ms  (runs: "
          + ", ".join(f"{r['step_ms']:.3f}" for r in results) + ")")
    print("  split (median per part): " + " / ".join(
        f"{p} {best['parts_ms'][p]:.3f}" for p in PARTS) + " ms")
    verdict = "MET" if best["step_ms"] <= TARGET_MS else "NOT MET"
    print(f"  target <= {TARGET_MS} ms per step at 256 sequences: {verdict}")
    if args.result_json:
        with open(args.result_json, "w") as f:
            json.dump({"num_seqs": args.num_seqs, "runs": results, "median": best}, f, indent=2)
    return 0
