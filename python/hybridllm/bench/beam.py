"""`hybridllm bench beam`: offline beam search (beam_width=4, ignore_eos) against n=4
sampling (ignore_eos) on the same prompts in the same process, alternating rounds. Both
decode four sequences a step and generate the same number of tokens (printed); the target is
beam search taking at most 1.5x the time of sampling."""

from __future__ import annotations

import argparse
import json
import statistics
import time

from hybridllm import LLM, BeamSearchParams, SamplingParams
from hybridllm.bench.datasets import random_prompts

TARGET = 1.5


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("beam", help="Beam search vs n-way sampling, offline.")
    parser.add_argument("--model", default=None)
    parser.add_argument("--num-prompts", type=int, default=8)
    parser.add_argument("--input-len", type=int, default=64)
    parser.add_argument("--output-len", type=int, default=64)
    parser.add_argument("--beam-width", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3,
                        help="Alternating timed rounds of each; the median is reported.")
    parser.add_argument("--result-json", default=None)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> None:
    llm = LLM(model=args.model)
    tok = llm.get_tokenizer()
    prompts = [tok.encode(text, add_special_tokens=False).ids
               for text in random_prompts(tok, args.num_prompts, args.input_len, seed=0)]
    k, out_len = args.beam_width, args.output_len
    beam = BeamSearchParams(beam_width=k, max_tokens=out_len, ignore_eos=True)
    sample = SamplingParams(n=k, temperature=1.0, seed=0, max_tokens=out_len, ignore_eos=True)

    def run_beam() -> int:
        outs = llm.beam_search(prompts, beam)
        return sum(len(s.tokens) - len(p) for o, p in zip(outs, prompts) for s in o.sequences)

    def run_sample() -> int:
        outs = llm.generate(prompts, sample, use_tqdm=False)
        return sum(len(c.token_ids) for o in outs for c in o.outputs)

    run_beam(), run_sample()  # warm-up: kernels built, allocator settled
    times: dict[str, list[float]] = {"beam": [], "sample": []}
    tokens: dict[str, int] = {}
    for _ in range(args.rounds):
        for name, fn in (("beam", run_beam), ("sample", run_sample)):
            start = time.perf_counter()
            tokens[name] = fn()
            times[name].append(time.perf_counter() - start)
    med = {name: statistics.median(t) for name, t in times.items()}
    ratio = med["beam"] / med["sample"]
    print(f"prompts: {len(prompts)} x {args.input_len} tokens, {out_len} generated per sequence")
    print(f"beam search (beam_width={k}, ignore_eos): {med['beam']:.3f} s median, "
          f"{tokens['beam']} generated tokens returned")
    print(f"n={k} sampling (ignore_eos):            {med['sample']:.3f} s median, "
          f"{tokens['sample']} generated tokens returned")
    verdict = "met" if ratio <= TARGET else "NOT met"
    print(f"beam / sampling time: {ratio:.2f}x (target <= {TARGET}x: {verdict})")
    if args.result_json:
        with open(args.result_json, "w") as f:
            json.dump({"times_s": times, "median_s": med, "tokens": tokens, "ratio": ratio,
                       "target": TARGET}, f, indent=1)
