"""`hybridllm bench structured`: offline, a batch of JSON-schema requests against the same
prompts unconstrained, in the same process, alternating rounds. Both run the same number of
decode steps (ignore_eos; the constrained ones are given schemas long enough not to end
first, and only steps where the whole batch decodes are compared). Printed: the median
constrained / unconstrained step time against the 1.10 target (the mask is filled while the
forward pass runs), the grammar compile time p50/p99 over a corpus of generated schemas, and
the per-step mask fill time and the part of it the sampler waited for. `--small` is CI's
smoke size; timings never fail it."""

from __future__ import annotations

import argparse
import json
import statistics
import time

from hybridllm import LLM, SamplingParams, StructuredOutputsParams
from hybridllm.bench.datasets import random_prompts

TARGET = 1.10
_TYPES = ({"type": "string"}, {"type": "integer"}, {"type": "number"}, {"type": "boolean"},
          {"type": "array", "items": {"type": "string"}},
          {"type": "string", "enum": ["red", "green", "blue"]})


def schema(i: int) -> dict:
    """The i-th schema of the corpus: 2-7 properties of varied types, some nested, and a
    free-text field last so an output does not end within the bench's steps."""
    props: dict[str, dict] = {}
    for j in range(2 + i % 6):
        props[f"field_{i}_{j}"] = _TYPES[(i + j) % len(_TYPES)]
    if i % 3 == 0:
        props[f"nested_{i}"] = {"type": "object", "properties": {"a": {"type": "integer"},
                                "b": {"type": "string", "maxLength": 8}}, "required": ["a"]}
    props["notes"] = {"type": "string"}
    return {"type": "object", "properties": props, "required": list(props),
            "additionalProperties": False}


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("structured", help="JSON-schema constrained vs unconstrained steps.")
    parser.add_argument("--model", default=None)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--input-len", type=int, default=32)
    parser.add_argument("--output-len", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=2,
                        help="Alternating timed rounds of each; the median step is reported.")
    parser.add_argument("--num-schemas", type=int, default=200,
                        help="Schemas compiled for the compile-time figures.")
    parser.add_argument("--small", action="store_true",
                        help="CI's smoke size: batch 8, 8 tokens, 1 round, 20 schemas.")
    parser.add_argument("--result-json", default=None)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> None:
    if args.small:
        args.batch, args.output_len, args.rounds, args.num_schemas = 8, 8, 1, 20
    llm = LLM(model=args.model, max_num_seqs=max(args.batch, 1))
    engine = llm.engine
    tok = llm.get_tokenizer()
    prompts = [tok.encode(text, add_special_tokens=False).ids
               for text in random_prompts(tok, args.batch, args.input_len, seed=0)]
    plain = SamplingParams(temperature=0, max_tokens=args.output_len, ignore_eos=True)
    constrained = [
        SamplingParams(temperature=0, max_tokens=args.output_len, ignore_eos=True,
                       structured_outputs=StructuredOutputsParams(json=schema(i % 8)))
        for i in range(args.batch)
    ]
    masks = engine.runner.grammar_masks
    counter = iter(range(10**9))

    def decode_steps(params: list[SamplingParams]) -> list[float]:
        """Seconds of each step in which the whole batch decoded one token."""
        for p, ids in zip(params, prompts):
            engine.add_request(f"b{next(counter)}", ids, p)
        times = []
        while engine.has_unfinished_requests():
            full = len(engine.scheduler.running) == len(prompts) and not engine.scheduler.waiting
            start = time.perf_counter()
            engine.step()
            if full:
                times.append(time.perf_counter() - start)
        return times

    decode_steps([plain] * len(prompts)), decode_steps(constrained)  # warm-up, compile
    steps: dict[str, list[float]] = {"unconstrained": [], "constrained": []}
    fills0, fill_s0, wait_s0 = masks.num_fills, masks.fill_seconds, masks.wait_seconds
    for _ in range(args.rounds):
        steps["unconstrained"] += decode_steps([plain] * len(prompts))
        steps["constrained"] += decode_steps(constrained)
    fills = masks.num_fills - fills0
    fill_ms = 1e3 * (masks.fill_seconds - fill_s0) / max(fills, 1)
    wait_ms = 1e3 * (masks.wait_seconds - wait_s0) / max(fills, 1)
    med = {k: statistics.median(v) for k, v in steps.items()}
    ratio = med["constrained"] / med["unconstrained"]

    compiler = engine.grammars
    compiler.compile_seconds.clear()
    for i in range(args.num_schemas):
        # Distinct texts (the compiler caches by grammar): each one is a real compile.
        compiler.matchers(StructuredOutputsParams(json=schema(1000 + i)).llguidance_grammar(), 1)
    compiles = sorted(compiler.compile_seconds)
    p50 = 1e3 * compiles[len(compiles) // 2]
    p99 = 1e3 * compiles[min(len(compiles) - 1, int(len(compiles) * 0.99))]

    print(f"batch: {len(prompts)} prompts x {args.input_len} tokens, {args.output_len} "
          f"tokens each; {len(steps['constrained'])} full-batch decode steps timed per kind")
    print(f"unconstrained step: {1e3 * med['unconstrained']:.1f} ms median")
    print(f"constrained step:   {1e3 * med['constrained']:.1f} ms median (8 JSON schemas)")
    verdict = "met" if ratio <= TARGET else "NOT met"
    print(f"constrained / unconstrained step time: {ratio:.3f}x (target <= {TARGET}x: {verdict})")
    print(f"mask per step: {fill_ms:.2f} ms filled (batch of {len(prompts)}, during the "
          f"forward pass), {wait_ms:.2f} ms of it waited for by the sampler")
    print(f"grammar compile over {len(compiles)} generated schemas: p50 {p50:.2f} ms, "
          f"p99 {p99:.2f} ms")
    if args.result_json:
        with open(args.result_json, "w") as f:
            json.dump({"step_s": steps, "median_step_s": med, "ratio": ratio, "target": TARGET,
                       "mask_fill_ms": fill_ms, "mask_wait_ms": wait_ms,
                       "compile_ms_p50": p50, "compile_ms_p99": p99}, f, indent=1)
