"""`hybridllm bench embed`: offline LLM.embed against sentence-transformers' encode, same run;
then served /v1/embeddings, Rust frontend vs Python fallback (bench/embed_serve.py).

The same sentences of mixed lengths (a few words to past the model's 256-token limit, so a few
are truncated on both sides) go through both, timed from strings to normalized arrays with the
same torch thread count, rounds alternating so that a busy machine hits both alike. Prints
sentences/s of each, their ratio against the target, and the padding each computes: none for
hybridllm (inputs packed into one flat batch), and for sentence-transformers the padded share
of the token slots of its batches (it sorts the inputs by length, then pads each batch of
--st-batch-size to its longest). Timings never fail the run: CI runs a small version.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics

from hybridllm.bench.throughput import Timer

TARGET_RATIO = 1.2
MODEL = "all-MiniLM-L6-v2"


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("embed", help="Offline embeddings vs sentence-transformers.")
    parser.add_argument("--model", default=MODEL)
    parser.add_argument("--num-sentences", type=int, default=2000)
    parser.add_argument("--st-batch-size", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3,
                        help="Timed rounds of each side, alternating; the median is reported.")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch intra-op threads for both (default: torch's choice).")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--skip-st", action="store_true", help="Only measure hybridllm.")
    parser.add_argument("--skip-offline", action="store_true")
    parser.add_argument("--serve-requests", type=int, default=2000,
                        help="Requests per round against the mock pooling runner (0: skip).")
    parser.add_argument("--serve-real-requests", type=int, default=300,
                        help="Requests per round against the real model (0: skip).")
    parser.add_argument("--serve-concurrency", type=int, default=32)
    parser.add_argument("--serve-rounds", type=int, default=3)
    parser.add_argument("--mock-step-ms", type=float, default=1.0,
                        help="The mock pooling runner's step time.")
    parser.add_argument("--result-json", default=None)
    parser.set_defaults(func=run)


def make_sentences(words: list[str], n: int, seed: int) -> list[str]:
    """n sentences: 40% of 3-15 words, 40% of 15-60, 20% of 60-300 (some over 256 tokens)."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        r = rng.random()
        lo, hi = (3, 15) if r < 0.4 else (15, 60) if r < 0.8 else (60, 300)
        sentence = " ".join(rng.choice(words) for _ in range(rng.randint(lo, hi)))
        out.append(sentence[0].upper() + sentence[1:] + rng.choice(".?!"))
    return out


def vocabulary_words(folder: str) -> list[str]:
    """Whole alphabetic words of the model's WordPiece vocabulary, as sample text."""
    from tokenizers import Tokenizer

    vocab = Tokenizer.from_file(f"{folder}/tokenizer.json").get_vocab()
    return sorted(w for w in vocab if w.isalpha() and w.isascii() and len(w) >= 3)


def padding_fraction(lengths: list[int], sentences: list[str], batch: int) -> float:
    """Padded share of the token slots sentence-transformers computes: its order (longest
    text first, by characters), batches of `batch`, each padded to its longest input."""
    order = sorted(range(len(sentences)), key=lambda i: -len(sentences[i]))
    slots = real = 0
    for start in range(0, len(order), batch):
        group = [lengths[i] for i in order[start : start + batch]]
        slots += max(group) * len(group)
        real += sum(group)
    return (slots - real) / slots


def run(args: argparse.Namespace) -> int:
    from hybridllm.models.resolve import resolve_model

    folder = str(resolve_model(args.model))
    sentences = make_sentences(vocabulary_words(folder), args.num_sentences, args.seed)
    result: dict = {}
    if not args.skip_offline:
        result["offline"] = offline(args, sentences)
    if args.serve_requests or args.serve_real_requests:
        result["served"] = served(args, folder, sentences)
    if args.result_json:
        with open(args.result_json, "w") as f:
            json.dump(result, f, indent=2)
    failed = sum(res[k]["failed"] for res in result.get("served", {}).values()
                 if isinstance(res, dict) for k in ("rust", "python"))
    return 1 if failed else 0


def served(args: argparse.Namespace, folder: str, sentences: list[str]) -> dict:
    from hybridllm.bench import embed_serve

    def cycle(n: int) -> list[str]:
        return [sentences[i % len(sentences)] for i in range(n)]

    out: dict = {}
    if args.serve_requests:
        out["mock"] = embed_serve.measure(
            folder, cycle(args.serve_requests), args.serve_concurrency, args.serve_rounds,
            ["--mock-engine", "--mock-step-ms", str(args.mock_step_ms)], "mock")
    if args.serve_real_requests:
        out["real"] = embed_serve.measure(
            folder, cycle(args.serve_real_requests), args.serve_concurrency,
            args.serve_rounds, [], "real")
    embed_serve.report(out.get("mock"), out.get("real"), args.serve_concurrency)
    return out


def offline(args: argparse.Namespace, sentences: list[str]) -> dict:
    import numpy as np
    import torch

    from hybridllm import LLM

    if args.threads:
        torch.set_num_threads(args.threads)
    llm = LLM(model=args.model)
    folder = str(llm.engine.config.model_path)
    llm.embed(sentences[:8], truncate_prompt_tokens=-1)  # warm-up

    def ours() -> np.ndarray:
        outputs = llm.embed(sentences, truncate_prompt_tokens=-1)
        return np.array([o.outputs.embedding for o in outputs], dtype=np.float32)

    lengths = [len(o.prompt_token_ids) for o in llm.embed(sentences, truncate_prompt_tokens=-1)]
    n_tokens = sum(lengths)
    print(f"{len(sentences)} sentences, {n_tokens} tokens (lengths {min(lengths)}-"
          f"{max(lengths)}, {sum(n == llm.engine.max_model_len for n in lengths)} truncated to "
          f"{llm.engine.max_model_len}); torch threads {torch.get_num_threads()}")
    st = theirs = None
    if not args.skip_st:
        from sentence_transformers import SentenceTransformer

        st = SentenceTransformer(folder, device="cpu")
        st.encode(sentences[:8], show_progress_bar=False)  # warm-up

        def theirs() -> np.ndarray:
            return st.encode(sentences, batch_size=args.st_batch_size, show_progress_bar=False)

    times: dict[str, list[Timer]] = {"hybridllm": [], "sentence-transformers": []}
    results: dict[str, np.ndarray] = {}
    for _ in range(args.rounds):
        for name, fn in (("hybridllm", ours), ("sentence-transformers", theirs)):
            if fn is None:
                continue
            with Timer() as t:
                results[name] = fn()
            times[name].append(t)
    result: dict[str, float] = {"num_sentences": len(sentences), "num_tokens": n_tokens}
    ours_s = statistics.median(t.wall for t in times["hybridllm"])
    result |= {"hybridllm_s": ours_s, "hybridllm_sent_s": len(sentences) / ours_s,
               "hybridllm_padding": 0.0}
    print(f"hybridllm             : {ours_s:7.2f} s  {len(sentences) / ours_s:8.1f} sentences/s"
          f"  padding 0.0% (packed, no padded tokens)")
    if st is not None:
        st_s = statistics.median(t.wall for t in times["sentence-transformers"])
        pad = padding_fraction(lengths, sentences, args.st_batch_size)
        cos = float((results["hybridllm"] * results["sentence-transformers"]).sum(1).min())
        ratio = st_s / ours_s
        result |= {"st_s": st_s, "st_sent_s": len(sentences) / st_s, "st_padding": pad,
                   "ratio": ratio, "min_cosine": cos}
        print(f"sentence-transformers : {st_s:7.2f} s  {len(sentences) / st_s:8.1f} sentences/s"
              f"  padding {pad:.1%} (length-sorted batches of {args.st_batch_size})")
        verdict = "MET" if ratio >= TARGET_RATIO else "NOT MET"
        print(f"ratio                 : {ratio:.2f}x sentences/s (target >= {TARGET_RATIO}x: "
              f"{verdict}); min cosine between the two {cos:.7f}")
    print("rounds (wall s): " + "; ".join(
        f"{name} " + ", ".join(f"{t.wall:.2f}" for t in ts) for name, ts in times.items() if ts
    ))
    return result
