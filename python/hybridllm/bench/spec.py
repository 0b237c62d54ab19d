"""`hybridllm bench spec`: n-gram speculative decoding on vs off, same run, offline engine.

Copy-heavy prompts (proofread a paragraph of real prose: the model writes it out again) at
batch 1, where prompt lookup should
pay (target: 2.0x the output tok/s without speculation), and random prompts at batch 1 and
16, where it finds nothing to copy and must not cost much (target: 0.95x). Prints tok/s, the
ratios, the acceptance rate and the mean accepted length, and the CPU's SIMD flags.
`--quick` is a smoke run for CI: tiny sizes, and it never fails on timings.

`--serve` runs the copy-heavy chats through two `serve --rust-frontend` servers instead (one
speculating, one not; the same streaming client, alternating, at each `--concurrency`) and
prints TPOT p50 and output tok/s of each, with their ratios.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from typing import Any

COPY_TARGET = 2.0
RANDOM_TARGET = 0.95
DEFAULT_SPEC = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4,
                "prompt_lookup_min": 2}

# Real prose (public-domain openings) for the copy task.
PARAGRAPHS = [
    "Call me Ishmael. Some years ago, never mind how long precisely, having little or no money "
    "in my purse, and nothing particular to interest me on shore, I thought I would sail about "
    "a little and see the watery part of the world. It is a way I have of driving off the "
    "spleen and regulating the circulation.",
    "It is a truth universally acknowledged, that a single man in possession of a good fortune, "
    "must be in want of a wife. However little known the feelings or views of such a man may "
    "be on his first entering a neighbourhood, this truth is so well fixed in the minds of the "
    "surrounding families, that he is considered the rightful property of some one or other of "
    "their daughters.",
    "It was the best of times, it was the worst of times, it was the age of wisdom, it was the "
    "age of foolishness, it was the epoch of belief, it was the epoch of incredulity, it was "
    "the season of Light, it was the season of Darkness, it was the spring of hope, it was the "
    "winter of despair.",
]


def copy_prompt(paragraph: str) -> str:
    """A proofreading request, which the bundled model answers by copying the text (asked to
    "repeat" it, it copied one paragraph of three and wrote an alphabet for another)."""
    return ("Please proofread the following text and return it unchanged if it has no "
            f"errors.\n\nText: {paragraph}\n\nCorrected text: ")


# Chat requests the bundled model answers by writing the text out again (checked by hand).
COPY_ASKS = ["Fix any spelling mistakes in this text and write out the whole text:\n\n{}",
             "Fix any typos in this text and write out the whole text:\n\n{}",
             "Fix any grammar mistakes in this text and write out the whole text:\n\n{}"]


def copy_chats(n: int) -> list[str]:
    """n distinct copy requests for chat: each ask of each paragraph, then the same with the
    paragraph's sentences rotated (new text, as copy-heavy as the first)."""
    out: list[str] = []
    turn = 0
    while len(out) < n:
        for ask in COPY_ASKS:
            for paragraph in PARAGRAPHS:
                sentences = [x.strip() + "." for x in paragraph.split(".") if x.strip()]
                k = turn % len(sentences)
                out.append(ask.format(" ".join(sentences[k:] + sentences[:k])))
        turn += 1
    return out[:n]


def cpu_flags() -> str:
    """The SIMD flags the CPU kernels care about, from /proc/cpuinfo (Linux)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            line = next((ln for ln in f if ln.startswith("flags")), "")
    except OSError:
        return "unknown"
    have = set(line.split(":", 1)[-1].split())
    wanted = ["sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512_vnni",
              "avx512_bf16", "amx_bf16", "amx_tile"]
    return " ".join(f for f in wanted if f in have) or "none of " + " ".join(wanted)


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("spec", help="N-gram speculative decoding on vs off (offline).")
    parser.add_argument("--model", default=None)
    parser.add_argument("--speculative-config", default=json.dumps(DEFAULT_SPEC))
    parser.add_argument("--output-len", type=int, default=96,
                        help="Output tokens per copy prompt (greedy, stops at EOS).")
    parser.add_argument("--random-output-len", type=int, default=64)
    parser.add_argument("--random-input-len", type=int, default=128)
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads.")
    parser.add_argument("--quick", action="store_true",
                        help="Tiny sizes, for CI: checks it runs; never fails on timings.")
    parser.add_argument("--serve", action="store_true",
                        help="Served through the Rust frontend (two servers, on and off) "
                             "instead of the offline engine: TPOT p50 at each concurrency.")
    parser.add_argument("--concurrency", default="1,8",
                        help="--serve: comma-separated concurrency levels.")
    parser.add_argument("--num-prompts", type=int, default=16,
                        help="--serve: copy chats per level (at least the concurrency).")
    parser.add_argument("--rounds", type=int, default=3,
                        help="Off/on runs per case (or level), alternating; medians reported.")
    parser.add_argument("--result-json", default=None)
    parser.set_defaults(func=run)


def _measure(llm: Any, prompts: list[Any], params: Any, batch: int) -> dict[str, float]:
    """Output tok/s over the prompts, `batch` at a time; spec counters over the run."""
    stats = llm.engine.stats
    before = (stats.spec_decode_num_drafts, stats.spec_decode_num_draft_tokens,
              stats.spec_decode_num_accepted_tokens)
    tokens, wall = 0, 0.0
    for i in range(0, len(prompts), batch):
        start = time.perf_counter()
        outs = llm.generate(prompts[i:i + batch], params, use_tqdm=False)
        wall += time.perf_counter() - start
        tokens += sum(len(o.outputs[0].token_ids) for o in outs)
    drafts = stats.spec_decode_num_drafts - before[0]
    draft_tokens = stats.spec_decode_num_draft_tokens - before[1]
    accepted = stats.spec_decode_num_accepted_tokens - before[2]
    return {
        "tok_s": tokens / wall if wall else 0.0, "tokens": tokens, "wall_s": wall,
        "acceptance_rate": accepted / draft_tokens if draft_tokens else 0.0,
        # vLLM's mean acceptance length: tokens per verify step, the bonus token included.
        "mean_accepted_len": 1 + accepted / drafts if drafts else 1.0,
        "num_drafts": drafts,
    }


def serve(args: argparse.Namespace) -> int:
    """Copy-heavy chats served by `serve --rust-frontend`, speculation off and on."""
    from hybridllm.bench.client import build_payload
    from hybridllm.bench.launch import start_server
    from hybridllm.bench.serve import first_model, run_level

    flags = ["--max-model-len", "1024"] + (["--model", args.model] if args.model else [])
    print(f"CPU flags: {cpu_flags()}", flush=True)
    servers = {"off": start_server("rust", flags),
               "on": start_server("rust", flags + ["--speculative-config",
                                                   args.speculative_config])}
    results: dict[str, Any] = {"speculative_config": json.loads(args.speculative_config),
                               "cpu_flags": cpu_flags(), "levels": {}}
    try:
        model = first_model(servers["off"].base_url, None)
        endpoint = "/v1/chat/completions"
        for level in (int(c) for c in args.concurrency.split(",")):
            payloads = [build_payload(endpoint, model, chat, args.output_len, False)
                        for chat in copy_chats(max(args.num_prompts, level))]
            runs: dict[str, list[dict]] = {"off": [], "on": []}
            for r in range(args.rounds):
                for name in ("off", "on") if r % 2 == 0 else ("on", "off"):
                    url = servers[name].base_url + endpoint
                    runs[name].append(run_level(url, payloads, float("inf"), level, 0,
                                                progress=False))
            row = {name: {"tpot_p50_ms": statistics.median(x["tpot_ms"]["p50"] for x in rs),
                          "output_tok_s": statistics.median(x["output_throughput"] for x in rs),
                          "failed": sum(x["failed"] for x in rs)}
                   for name, rs in runs.items()}
            row["tpot_ratio"] = row["off"]["tpot_p50_ms"] / max(row["on"]["tpot_p50_ms"], 1e-9)
            row["throughput_ratio"] = row["on"]["output_tok_s"] / max(
                row["off"]["output_tok_s"], 1e-9)
            results["levels"][level] = row
            print(f"served copy chats, concurrency {level}: TPOT p50 off "
                  f"{row['off']['tpot_p50_ms']:.1f} ms, on {row['on']['tpot_p50_ms']:.1f} ms "
                  f"(off/on {row['tpot_ratio']:.2f}x); output tok/s off "
                  f"{row['off']['output_tok_s']:.1f}, on {row['on']['output_tok_s']:.1f} "
                  f"({row['throughput_ratio']:.2f}x); failed {row['off']['failed']}/"
                  f"{row['on']['failed']}", flush=True)
    finally:
        for server in servers.values():
            server.stop()
    if args.result_json:
        with open(args.result_json, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=2)
    return 0


def _median_run(runs: list[dict[str, float]]) -> dict[str, float]:
    """Median tok/s over the rounds; the counters (the same every round) from the first."""
    return runs[0] | {"tok_s": statistics.median(r["tok_s"] for r in runs)}


def run(args: argparse.Namespace) -> int:
    if args.serve:
        return serve(args)
    import torch

    from hybridllm import LLM, SamplingParams

    if args.threads:
        torch.set_num_threads(args.threads)
    if args.quick:
        args.output_len, args.random_output_len, args.random_input_len = 24, 8, 32
    print(f"CPU flags: {cpu_flags()}; torch threads {torch.get_num_threads()}", flush=True)
    spec = json.loads(args.speculative_config)
    engines = {"off": LLM(model=args.model), "on": LLM(model=args.model, speculative_config=spec)}
    paragraphs = PARAGRAPHS[:1] if args.quick else PARAGRAPHS
    copy_prompts = [copy_prompt(p) for p in paragraphs]
    rng = random.Random(0)
    vocab = engines["off"].engine.config.model.vocab_size
    num_random = 2 if args.quick else 16
    random_prompts = [[rng.randrange(100, vocab) for _ in range(args.random_input_len)]
                      for _ in range(num_random)]
    copy_params = SamplingParams(temperature=0, max_tokens=args.output_len)
    random_params = SamplingParams(temperature=0, max_tokens=args.random_output_len,
                                   ignore_eos=True)
    for llm in engines.values():  # warm-up
        llm.generate(copy_prompts[:1], SamplingParams(temperature=0, max_tokens=4),
                     use_tqdm=False)
    cases = [("copy, batch 1", copy_prompts, copy_params, 1, COPY_TARGET),
             ("random, batch 1", random_prompts[:2], random_params, 1, RANDOM_TARGET),
             (f"random, batch {num_random}", random_prompts, random_params, num_random,
              RANDOM_TARGET)]
    results: dict[str, Any] = {"speculative_config": spec, "cpu_flags": cpu_flags(), "cases": {}}
    failed = []
    rounds = 1 if args.quick else args.rounds
    for name, prompts, params, batch, target in cases:
        # Off and on alternate, rounds times (a shared machine's load drifts): the medians of
        # each side's tok/s and of the rounds' ratios.
        runs: dict[str, list[dict[str, float]]] = {"off": [], "on": []}
        for r in range(rounds):
            for side in ("off", "on") if r % 2 == 0 else ("on", "off"):
                runs[side].append(_measure(engines[side], prompts, params, batch))
        off, on = (_median_run(runs[side]) for side in ("off", "on"))
        ratio = statistics.median(b["tok_s"] / a["tok_s"] if a["tok_s"] else 0.0
                                  for a, b in zip(runs["off"], runs["on"]))
        ok = ratio >= target
        if not ok:
            failed.append(name)
        results["cases"][name] = {"off": off, "on": on, "ratio": ratio, "target": target,
                                  "rounds": rounds}
        print(f"{name:>18}: off {off['tok_s']:7.1f} tok/s, on {on['tok_s']:7.1f} tok/s, "
              f"ratio {ratio:.2f}x (target {target}x: {'met' if ok else 'MISSED'}; median of "
              f"{rounds}); acceptance {on['acceptance_rate']:.1%}, mean accepted length "
              f"{on['mean_accepted_len']:.2f} over {on['num_drafts']:.0f} verify steps",
              flush=True)
    if args.result_json:
        with open(args.result_json, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=2)
    if args.quick:
        return 0
    return 1 if failed else 0
