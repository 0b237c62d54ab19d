"""`hybridllm bench structured`: offline, a batch of JSON-schema requests against the same
prompts unconstrained, in the same process, alternating rounds. Both run the same number of
decode steps (ignore_eos; the constrained ones are given schemas long enough not to end
first, and only steps where the whole batch decodes are compared). Printed: the median
constrained / unconstrained step time against the 1.10 target (the mask is filled while the
forward pass runs), the grammar compile time p50/p99 over a corpus of generated schemas, and
the per-step mask fill time and the part of it the sampler waited for. With `--served`: the
same model behind the Rust frontend at concurrency 16, the TTFT p50 of requests with a JSON
schema against the same requests without, alternating rounds (target: at most 5 ms added).
`--corpus DIR` times the compiles over JSONSchemaBench's schemas (`<subset>.jsonl` files, as
tests/data/jsonschemabench) instead of generated ones. `--small` is CI's smoke size; timings
never fail it."""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
import urllib.request
from pathlib import Path
from typing import Any

from hybridllm import LLM, SamplingParams, StructuredOutputsParams
from hybridllm.bench.client import build_payload, make_session, send_request
from hybridllm.bench.datasets import random_prompts
from hybridllm.bench.launch import start_server

TARGET = 1.10
TTFT_TARGET_MS = 5.0
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
    parser.add_argument("--corpus", default=None, metavar="DIR",
                        help="Time the compiles over these JSONSchemaBench files instead.")
    parser.add_argument("--served", action="store_true",
                        help="Also: TTFT added by a schema through the Rust frontend.")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--served-requests", type=int, default=96,
                        help="Requests of each kind per served round.")
    parser.add_argument("--small", action="store_true",
                        help="CI's smoke size: batch 8, 8 tokens, 1 round, 20 schemas.")
    parser.add_argument("--result-json", default=None)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> None:
    if args.small:
        args.batch, args.output_len, args.rounds, args.num_schemas = 8, 8, 1, 20
        args.served_requests = 16
    offline(args)
    if args.served:
        served(args)


def offline(args: argparse.Namespace) -> None:
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
    schemas = (corpus(args.corpus) if args.corpus
               else [schema(1000 + i) for i in range(args.num_schemas)])
    refused = 0
    for s in schemas:
        # Distinct texts (the compiler caches by grammar): each one is a real compile.
        try:
            compiler.matchers(StructuredOutputsParams(json=s).llguidance_grammar(), 1)
        except ValueError:
            refused += 1  # timed too: a refusal is a compile that ended in an error
    compiles = sorted(compiler.compile_seconds)
    kind = f"JSONSchemaBench schemas ({refused} refused)" if args.corpus else "generated schemas"
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
    print(f"grammar compile over {len(compiles)} {kind}: p50 {p50:.2f} ms, p99 {p99:.2f} ms")
    if args.result_json:
        with open(args.result_json, "w") as f:
            json.dump({"step_s": steps, "median_step_s": med, "ratio": ratio, "target": TARGET,
                       "mask_fill_ms": fill_ms, "mask_wait_ms": wait_ms,
                       "compile_ms_p50": p50, "compile_ms_p99": p99}, f, indent=1)


def corpus(folder: str) -> list[dict[str, Any]]:
    """The schemas of a JSONSchemaBench folder (one `{"id", "schema"}` object a line)."""
    return [json.loads(line)["schema"] for f in sorted(Path(folder).glob("*.jsonl"))
            for line in f.read_text().splitlines() if line.strip()]


def served(args: argparse.Namespace) -> None:
    """TTFT through the Rust frontend at `--concurrency`, with a JSON schema (one of 8, as
    `response_format`) and without, alternating rounds after a warm-up of each."""
    flags = ["--max-num-seqs", str(args.concurrency)] + (["--model", args.model]
                                                         if args.model else [])
    server = start_server("rust", flags)
    try:
        with urllib.request.urlopen(server.base_url + "/v1/models") as r:
            model = json.load(r)["data"][0]["id"]
        url = server.base_url + "/v1/chat/completions"

        def fmt(i: int) -> dict[str, Any]:
            return {"response_format": {"type": "json_schema", "json_schema": {
                "name": f"s{i % 8}", "schema": schema(i % 8)}}}

        def kinds() -> dict[str, Any]:
            return {"unconstrained": lambda i: {}, "JSON schema": fmt}

        ttft: dict[str, list[float]] = {k: [] for k in kinds()}
        for r in range(args.rounds + 1):
            for name, extra in kinds().items():
                got = asyncio.run(_ttft_round(url, model, args, extra))
                if r:  # the first round of each warms up
                    ttft[name] += got
    finally:
        server.stop()
    p50 = {k: 1e3 * statistics.median(v) for k, v in ttft.items()}
    added = p50["JSON schema"] - p50["unconstrained"]
    verdict = "met" if added <= TTFT_TARGET_MS else "NOT met"
    print(f"served (Rust frontend, concurrency {args.concurrency}, "
          f"{len(ttft['unconstrained'])} requests of each kind): TTFT p50 "
          f"{p50['unconstrained']:.1f} ms unconstrained, {p50['JSON schema']:.1f} ms with a "
          f"JSON schema: {added:+.1f} ms added (target <= {TTFT_TARGET_MS:.0f} ms: {verdict})")


async def _ttft_round(url: str, model: str, args: argparse.Namespace,
                      extra: Any) -> list[float]:
    """Seconds to the first token of each of `--served-requests` streamed chat requests."""
    session = make_session(args.concurrency, None)
    gate = asyncio.Semaphore(args.concurrency)

    async def one(i: int) -> float:
        payload = build_payload(url, model, f"Describe item {i} as JSON.", 4, True, extra(i))
        async with gate:
            res = await send_request(session, url, payload)
        if not res.success:
            raise RuntimeError(f"request failed: {res.error}")
        return res.ttft

    try:
        return list(await asyncio.gather(*(one(i) for i in range(args.served_requests))))
    finally:
        await session.close()
