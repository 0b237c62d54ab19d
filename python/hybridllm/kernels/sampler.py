"""GPU sampler: one program per row, no host sync; semantics of kernels/sampler_ref.py.

Top-k and top-p thresholds are found without sorting, by bisection on the order-preserving
int32 key of the fp32 logits (33 counting passes over the row each, exact), so the result is
the same threshold the sorted reference finds. Randomness is Philox keyed by (seed, step) per
row, with the same counters as the reference, then Gumbel-max over the kept tokens.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from hybridllm.kernels import interpreting
from hybridllm.kernels.sampler_ref import SamplingTensors


@triton.jit
def _key(x):
    # fp32 -> int32 with the same order (negative floats have their magnitude bits flipped).
    bits = x.to(tl.int32, bitcast=True)
    return tl.where(bits >= 0, bits, bits ^ 0x7FFFFFFF)


@triton.jit
def _kept(x, thresh_key, row_max, min_p):
    return (_key(x) >= thresh_key) & (tl.exp(x - row_max) >= min_p)


@triton.jit
def _sampler_kernel(
    tokens_ptr, work_ptr, logits_ptr, prompt_counts_ptr, output_counts_ptr,
    temp_ptr, top_k_ptr, top_p_ptr, min_p_ptr, rep_ptr, pres_ptr, freq_ptr,
    seeds_ptr, steps_ptr, vocab,
    HAS_PROMPT: tl.constexpr, HAS_OUTPUT: tl.constexpr, WRITE_MASKED: tl.constexpr,
    BLOCK: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    base = row * vocab
    temp = tl.load(temp_ptr + row)
    greedy = temp <= 0.0
    rep = tl.load(rep_ptr + row)
    pres = tl.load(pres_ptr + row)
    freq = tl.load(freq_ptr + row)
    offs = tl.arange(0, BLOCK)

    # Pass 1: penalties and temperature into the fp32 work row; row max and first argmax.
    row_max = float("-inf")
    best = 0
    for start in range(0, vocab, BLOCK):
        cols = start + offs
        ok = cols < vocab
        x = tl.load(logits_ptr + base + cols, mask=ok, other=0.0).to(tl.float32)
        seen = tl.zeros([BLOCK], tl.int32)
        out_cnt = tl.zeros([BLOCK], tl.float32)
        if HAS_OUTPUT:
            out_cnt = tl.load(output_counts_ptr + base + cols, mask=ok, other=0).to(tl.float32)
            seen = (out_cnt > 0.0).to(tl.int32)
        if HAS_PROMPT:
            in_prompt = tl.load(prompt_counts_ptr + base + cols, mask=ok, other=0) > 0
            seen = seen | in_prompt.to(tl.int32)
        if rep != 1.0:
            x = tl.where(seen != 0, tl.where(x > 0.0, x / rep, x * rep), x)
        x = x - freq * out_cnt
        x = x - pres * (out_cnt > 0.0).to(tl.float32)
        if not greedy:
            x = x / temp
        x = tl.where(ok, x, float("-inf"))
        tl.store(work_ptr + base + cols, x, mask=ok)
        blk_max = tl.max(x, 0)
        blk_arg = start + tl.argmax(x, 0, tie_break_left=True)
        best = tl.where(blk_max > row_max, blk_arg, best)
        row_max = tl.maximum(row_max, blk_max)

    token = best.to(tl.int64)
    lowest: tl.constexpr = -2147483648
    # Typed up front: values assigned under a runtime `if` must keep one type.
    thresh = tl.full([], lowest, tl.int64)
    min_p = tl.full([], 0.0, tl.float32)
    if not greedy:
        min_p = tl.load(min_p_ptr + row)
        top_k = tl.load(top_k_ptr + row)
        if (top_k > 0) & (top_k < vocab):
            # Largest key t with count(key >= t) >= top_k: the k-th largest logit.
            lo = tl.full([], lowest, tl.int64)
            hi = _key(row_max).to(tl.int64)
            for _ in range(33):
                mid = lo + (hi - lo + 1) // 2
                count = 0
                for start in range(0, vocab, BLOCK):
                    cols = start + offs
                    x = tl.load(work_ptr + base + cols, mask=cols < vocab, other=float("-inf"))
                    count += tl.sum((_key(x).to(tl.int64) >= mid).to(tl.int32), 0)
                lo = tl.where(count >= top_k, mid, lo)
                hi = tl.where(count >= top_k, hi, mid - 1)
            thresh = lo
        top_p = tl.load(top_p_ptr + row)
        if top_p < 1.0:
            total = 0.0
            for start in range(0, vocab, BLOCK):
                cols = start + offs
                x = tl.load(work_ptr + base + cols, mask=cols < vocab, other=float("-inf"))
                total += tl.sum(tl.where(_key(x) >= thresh, tl.exp(x - row_max), 0.0), 0)
            target = top_p * total
            # Largest key t whose tokens (within top-k) hold at least top_p of the mass.
            lo = thresh
            hi = _key(row_max).to(tl.int64)
            for _ in range(33):
                mid = lo + (hi - lo + 1) // 2
                mass = 0.0
                for start in range(0, vocab, BLOCK):
                    cols = start + offs
                    x = tl.load(work_ptr + base + cols, mask=cols < vocab, other=float("-inf"))
                    mass += tl.sum(tl.where(_key(x).to(tl.int64) >= mid, tl.exp(x - row_max),
                                            0.0), 0)
                lo = tl.where(mass >= target, mid, lo)
                hi = tl.where(mass >= target, hi, mid - 1)
            thresh = lo
        # Gumbel-max over kept tokens; uniforms from Philox(seed; index, step lo, step hi, 0).
        seed = tl.load(seeds_ptr + row)
        step = tl.load(steps_ptr + row)
        step_lo = (step & 0xFFFFFFFF).to(tl.uint32)
        step_hi = ((step >> 32) & 0xFFFFFFFF).to(tl.uint32)
        best_score = float("-inf")
        for start in range(0, vocab, BLOCK):
            cols = start + offs
            ok = cols < vocab
            x = tl.load(work_ptr + base + cols, mask=ok, other=float("-inf"))
            zero = tl.zeros([BLOCK], tl.uint32)
            r, _, _, _ = tl.philox(seed, cols.to(tl.uint32), zero + step_lo, zero + step_hi, zero)
            u = ((r >> 8).to(tl.float32) + 0.5) * (1.0 / 16777216.0)
            keep = ok & _kept(x, thresh.to(tl.int32), row_max, min_p)
            score = tl.where(keep, x - tl.log(-tl.log(u)), float("-inf"))
            blk_max = tl.max(score, 0)
            blk_arg = start + tl.argmax(score, 0, tie_break_left=True)
            token = tl.where(blk_max > best_score, blk_arg.to(tl.int64), token)
            best_score = tl.maximum(best_score, blk_max)
    tl.store(tokens_ptr + row, token)

    if WRITE_MASKED:
        for start in range(0, vocab, BLOCK):
            cols = start + offs
            ok = cols < vocab
            x = tl.load(work_ptr + base + cols, mask=ok, other=float("-inf"))
            keep = _kept(x, thresh.to(tl.int32), row_max, min_p)
            tl.store(work_ptr + base + cols, tl.where(keep, x, float("-inf")), mask=ok)


def sample(
    logits: torch.Tensor, t: SamplingTensors, return_logits: bool = False
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """[B, V] logits -> ([B] int64 tokens, processed logits with dropped tokens at -inf if
    return_logits). Same semantics and random stream as sampler_ref.sample_reference."""
    batch, vocab = logits.shape
    logits = logits.contiguous()
    tokens = torch.empty(batch, dtype=torch.int64, device=logits.device)
    work = torch.empty(batch, vocab, dtype=torch.float32, device=logits.device)
    if batch == 0:
        return tokens, (work if return_logits else None)
    prompt = t.prompt_counts.contiguous() if t.prompt_counts is not None else logits
    output = t.output_counts.contiguous() if t.output_counts is not None else logits
    block = min(triton.next_power_of_2(vocab), 1024 if interpreting() else 4096)
    _sampler_kernel[(batch,)](
        tokens, work, logits, prompt, output,
        t.temperature, t.top_k, t.top_p, t.min_p,
        t.repetition_penalty, t.presence_penalty, t.frequency_penalty,
        t.seeds, t.steps, vocab,
        HAS_PROMPT=t.prompt_counts is not None, HAS_OUTPUT=t.output_counts is not None,
        WRITE_MASKED=return_logits, BLOCK=block, num_warps=8,
    )
    return tokens, (work if return_logits else None)
