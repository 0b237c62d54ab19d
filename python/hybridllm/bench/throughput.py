"""Offline throughput: LLM.generate against transformers' padded-batch generate, same run.

64 prompts of mixed lengths, fixed output length (ignore_eos), greedy. Prints tokens/s of
both and the ratio against the target.
"""

from __future__ import annotations

import argparse
import json
import random
import time

TARGET_RATIO = 2.0


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("throughput", help="Offline throughput vs transformers.")
    parser.add_argument("--model", default=None)
    parser.add_argument("--num-prompts", type=int, default=64)
    parser.add_argument("--min-input-len", type=int, default=16)
    parser.add_argument("--max-input-len", type=int, default=256)
    parser.add_argument("--output-len", type=int, default=128)
    parser.add_argument("--hf-batch-size", type=int, default=16)
    parser.add_argument("--skip-hf", action="store_true", help="Only measure hybridllm.")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None,
                        help="torch intra-op threads (default: torch's choice, one per core).")
    parser.add_argument("--result-json", default=None)
    parser.set_defaults(func=run)


def make_prompts(vocab: int, n: int, lo: int, hi: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    # Ids above the special tokens, lengths spread evenly over [lo, hi].
    return [[rng.randrange(100, vocab) for _ in range(rng.randint(lo, hi))] for _ in range(n)]


class Timer:
    """Wall and CPU seconds of a block; CPU time is steadier on a shared, noisy machine."""

    def __enter__(self) -> Timer:
        self.wall, self.cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall = time.perf_counter() - self.wall
        self.cpu = time.process_time() - self.cpu


def run_hybridllm(model: str | None, prompts: list[list[int]], output_len: int) -> Timer:
    from hybridllm import LLM, SamplingParams

    llm = LLM(model=model)
    params = SamplingParams(temperature=0, max_tokens=output_len, ignore_eos=True)
    # warm-up; no progress bar inside the timed run (the transformers side has none)
    llm.generate(prompts[:2], SamplingParams(temperature=0, max_tokens=4), use_tqdm=False)
    with Timer() as t:
        outputs = llm.generate(prompts, params, use_tqdm=False)
    assert all(len(o.outputs[0].token_ids) == output_len for o in outputs)
    return t


def run_transformers(folder: str, prompts: list[list[int]], output_len: int, batch: int) -> Timer:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    pad = 2
    with torch.inference_mode():
        model.generate(torch.tensor([prompts[0][:8]]), max_new_tokens=4, pad_token_id=pad)
        timer = Timer().__enter__()
        for i in range(0, len(prompts), batch):
            group = prompts[i : i + batch]
            width = max(len(p) for p in group)
            ids = torch.tensor([[pad] * (width - len(p)) + p for p in group])  # left padding
            mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in group])
            out = model.generate(
                ids, attention_mask=mask, max_new_tokens=output_len, min_new_tokens=output_len,
                do_sample=False, pad_token_id=pad,
            )
            assert out.shape[1] == width + output_len
        timer.__exit__()
        return timer


def run(args: argparse.Namespace) -> int:
    import torch

    from hybridllm.models.registry import generation_config
    from hybridllm.models.resolve import resolve_model

    folder = resolve_model(args.model)
    vocab = generation_config(folder).vocab_size
    prompts = make_prompts(
        vocab, args.num_prompts, args.min_input_len, args.max_input_len, args.seed
    )
    if args.threads:
        torch.set_num_threads(args.threads)
    out_tokens = args.num_prompts * args.output_len
    print(f"{args.num_prompts} prompts, {sum(map(len, prompts))} prompt tokens, "
          f"{out_tokens} output tokens; torch threads {torch.get_num_threads()}")
    ours = run_hybridllm(str(folder), prompts, args.output_len)
    result = {"hybridllm_s": ours.wall, "hybridllm_cpu_s": ours.cpu,
              "hybridllm_tok_s": out_tokens / ours.wall}
    print(f"hybridllm     : {ours.wall:7.2f} s wall {ours.cpu:7.2f} s cpu  "
          f"{out_tokens / ours.wall:8.1f} output tokens/s")
    if not args.skip_hf:
        hf = run_transformers(str(folder), prompts, args.output_len, args.hf_batch_size)
        ratio, cpu_ratio = hf.wall / ours.wall, hf.cpu / ours.cpu
        result |= {"transformers_s": hf.wall, "transformers_cpu_s": hf.cpu,
                   "transformers_tok_s": out_tokens / hf.wall, "ratio": ratio,
                   "cpu_ratio": cpu_ratio}
        print(f"transformers  : {hf.wall:7.2f} s wall {hf.cpu:7.2f} s cpu  "
              f"{out_tokens / hf.wall:8.1f} output tokens/s (padded batches of "
              f"{args.hf_batch_size})")
        verdict = "MET" if ratio >= TARGET_RATIO else "NOT MET"
        print(f"ratio         : {ratio:.2f}x wall, {cpu_ratio:.2f}x cpu time "
              f"(target >= {TARGET_RATIO:.1f}x: {verdict})")
    if args.result_json:
        with open(args.result_json, "w") as f:
            json.dump(result, f, indent=2)
    return 0
