"""Greedy parity of the engine on CUDA against transformers (run by ci/gpu_check.sh).

fp32 must match token for token (CUDA graphs with the profiled KV cache, eager mixed steps under
a small budget, forced preemption); bf16 reports the fraction of matching tokens, against
transformers fp32 and against its own eager run; a seeded sampled request must give the same
tokens alone and inside a batch. Prints one `parity:` line per figure; exit 1 if a must fails.
"""

from __future__ import annotations

import gc
import os
import sys
import time

import torch

from hybridllm import LLM, SamplingParams
from hybridllm.models.resolve import resolve_model
from tests.golden.kinds import PROMPTS

MAX_TOKENS = 32
GREEDY = SamplingParams(temperature=0, max_tokens=MAX_TOKENS, min_tokens=MAX_TOKENS)
FIXED_KV = {"kv_cache_memory": 2 << 30}
DEVICE = os.environ.get("PARITY_DEVICE", "cuda")  # cpu: a slow smoke run of this script


def empty_cache() -> None:
    if DEVICE == "cuda":
        torch.cuda.empty_cache()


def reference(model_path: str) -> list[list[int]]:
    from transformers import AutoModelForCausalLM

    from hybridllm.text.tokenizer import load_tokenizer

    tok = load_tokenizer(resolve_model(model_path))[0]
    hf = AutoModelForCausalLM.from_pretrained(resolve_model(model_path), dtype=torch.float32)
    hf = hf.to(DEVICE).eval()
    out = []
    for prompt in PROMPTS:
        ids = torch.tensor([tok.encode(prompt).ids], device=DEVICE)
        with torch.inference_mode():
            gen = hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=MAX_TOKENS,
                              min_new_tokens=MAX_TOKENS, do_sample=False, pad_token_id=2)
        out.append(gen[0, ids.shape[1]:].tolist())
    del hf
    return out


def generate(model: str, prompts: list[str], params: SamplingParams | list[SamplingParams],
             **kwargs: object) -> tuple[list[list[int]], LLM]:
    t0 = time.perf_counter()
    llm = LLM(model=model, device=DEVICE, **kwargs)
    start = time.perf_counter() - t0
    got = [o.outputs[0].token_ids for o in llm.generate(prompts, params)]
    runner = llm.engine.runner
    print(f"  ({kwargs}: start-up {start:.1f} s, {runner.num_blocks} KV blocks, "
          f"graphs {'on' if runner.graphs else 'off'})", flush=True)
    return got, llm


def cleanup() -> None:
    """After `del llm` in the caller: free its KV cache and graph pool before the next one."""
    gc.collect()
    empty_cache()


def match_fraction(got: list[list[int]], want: list[list[int]]) -> tuple[float, int]:
    same = sum(a == b for g, w in zip(got, want) for a, b in zip(g, w))
    total = sum(len(w) for w in want)
    return same / total, sum(g == w for g, w in zip(got, want))


def main() -> int:
    model = sys.argv[1] if len(sys.argv) > 1 else "SmolLM2-135M-Instruct"
    want = reference(model)
    failed = []

    def must(name: str, got: list[list[int]], expected: list[list[int]]) -> None:
        frac, exact = match_fraction(got, expected)
        ok = got == expected
        print(f"parity: {name}: {'EXACT' if ok else 'MISMATCH'} ({frac * 100:.1f}% tokens, "
              f"{exact}/{len(expected)} prompts)", flush=True)
        if not ok:
            failed.append(name)

    got, llm = generate(model, PROMPTS, GREEDY, dtype="float32")  # profiled KV, graphs
    must("fp32 cuda-graphs vs transformers", got, want)
    again = [o.outputs[0].token_ids for o in llm.generate(PROMPTS, GREEDY)]
    must("fp32 cuda-graphs prefix-cache hits", again, want)
    del llm
    cleanup()
    got, llm = generate(model, PROMPTS, GREEDY, dtype="float32", enforce_eager=True,
                        max_num_batched_tokens=24, max_num_seqs=4, **FIXED_KV)
    must("fp32 eager chunked small budget", got, want)
    del llm
    cleanup()
    got, llm = generate(model, PROMPTS, GREEDY, dtype="float32", num_gpu_blocks_override=14,
                        max_model_len=128)
    must("fp32 cuda-graphs forced preemption", got, want)
    print(f"  preemptions: {llm.engine.scheduler.num_preemptions}")
    del llm
    cleanup()

    bf16, llm = generate(model, PROMPTS, GREEDY, dtype="bfloat16", **FIXED_KV)
    del llm
    cleanup()
    frac, exact = match_fraction(bf16, want)
    print(f"parity: bf16 cuda-graphs vs transformers fp32: {frac * 100:.1f}% tokens match, "
          f"{exact}/{len(want)} prompts exact", flush=True)
    eager, llm = generate(model, PROMPTS, GREEDY, dtype="bfloat16", enforce_eager=True,
                          **FIXED_KV)
    del llm
    cleanup()
    frac, exact = match_fraction(bf16, eager)
    print(f"parity: bf16 cuda-graphs vs bf16 eager: {frac * 100:.1f}% tokens match, "
          f"{exact}/{len(want)} prompts exact", flush=True)

    seeded = SamplingParams(temperature=0.8, top_p=0.9, seed=7, max_tokens=MAX_TOKENS)
    free = SamplingParams(temperature=1.0, max_tokens=MAX_TOKENS)
    alone, llm = generate(model, PROMPTS[:1], seeded, dtype="float32", **FIXED_KV)
    batch = [o.outputs[0].token_ids
             for o in llm.generate(PROMPTS, [seeded] + [free] * (len(PROMPTS) - 1))]
    del llm
    cleanup()
    must("fp32 seeded sample alone vs in a batch", batch[:1], alone)
    print(f"parity: {'FAILED ' + ', '.join(failed) if failed else 'all exact checks passed'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
