"""Torch reference sampler: the oracle for kernels/sampler.py, and a CPU path.

Per row: repetition penalty (tokens seen in prompt or output), frequency / presence penalties
(output counts), temperature (0 = greedy argmax), then top-k, top-p over the top-k set, and
min-p, all as thresholds (ties at a threshold are kept). Sampling is Gumbel-max with uniforms
from Philox-4x32-10 keyed by the row's seed, counter (vocab index, step): a row's draw depends
only on (seed, step, its logits), never on its batch mates, and matches the Triton kernel's.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

M32 = 0xFFFFFFFF


@dataclass
class SamplingTensors:
    """Per-row sampling parameters, all [B] on the logits' device."""

    temperature: torch.Tensor  # fp32; <= 0 means greedy
    top_k: torch.Tensor  # int32; <= 0 or >= vocab means off
    top_p: torch.Tensor  # fp32; 1 means off
    min_p: torch.Tensor  # fp32; 0 means off
    repetition_penalty: torch.Tensor  # fp32; 1 means off
    presence_penalty: torch.Tensor  # fp32
    frequency_penalty: torch.Tensor  # fp32
    seeds: torch.Tensor  # int64
    steps: torch.Tensor  # int64: tokens sampled so far for the request
    prompt_counts: torch.Tensor | None = None  # [B, V] int32 occurrences in the prompt
    output_counts: torch.Tensor | None = None  # [B, V] int32 occurrences in the output


def philox_uniform(seeds: torch.Tensor, steps: torch.Tensor, vocab: int) -> torch.Tensor:
    """[B, V] uniforms in (0, 1): Philox-4x32-10, key = seed, counter = (index, step lo,
    step hi, 0); first output word, top 24 bits, centred: ((r >> 8) + 0.5) / 2^24.
    int64 products wrap mod 2^64, which keeps the 32x32 -> 64 high word exact."""
    b = seeds.shape[0]
    c0 = torch.arange(vocab, dtype=torch.int64, device=seeds.device).expand(b, vocab)
    c1 = (steps & M32)[:, None].expand(b, vocab)
    c2 = ((steps >> 32) & M32)[:, None].expand(b, vocab)
    c3 = torch.zeros_like(c0)
    k0 = (seeds & M32)[:, None]
    k1 = ((seeds >> 32) & M32)[:, None]
    for _ in range(10):
        p0 = c0 * 0xD2511F53
        p1 = c2 * 0xCD9E8D57
        c0, c1, c2, c3 = (
            ((p1 >> 32) & M32) ^ c1 ^ k0,
            p1 & M32,
            ((p0 >> 32) & M32) ^ c3 ^ k1,
            p0 & M32,
        )
        k0 = (k0 + 0x9E3779B9) & M32
        k1 = (k1 + 0xBB67AE85) & M32
    return ((c0 >> 8).to(torch.float32) + 0.5) * (1.0 / 16777216.0)


def process_logits_reference(logits: torch.Tensor, t: SamplingTensors) -> torch.Tensor:
    """Penalized, temperature-scaled logits with dropped tokens at -inf (greedy rows are only
    penalized, not scaled or truncated)."""
    x = logits.float().clone()
    vocab = x.shape[1]
    out_counts = t.output_counts if t.output_counts is not None else torch.zeros_like(x).int()
    seen = out_counts > 0
    if t.prompt_counts is not None:
        seen = seen | (t.prompt_counts > 0)
    rep = t.repetition_penalty[:, None]
    x = torch.where(seen & (rep != 1.0), torch.where(x > 0, x / rep, x * rep), x)
    x = x - t.frequency_penalty[:, None] * out_counts.float()
    x = x - t.presence_penalty[:, None] * (out_counts > 0).float()
    greedy = t.temperature <= 0
    temp = torch.where(greedy, 1.0, t.temperature)[:, None]
    x = torch.where(greedy[:, None], x, x / temp)

    keep = torch.ones_like(x, dtype=torch.bool)
    for row in range(x.shape[0]):
        if bool(greedy[row]):
            continue
        lr = x[row]
        k = int(t.top_k[row])
        if 0 < k < vocab:
            keep[row] &= lr >= torch.topk(lr, k).values[-1]
        top_p = float(t.top_p[row])
        row_max = lr.max()
        if top_p < 1.0:
            masked = torch.where(keep[row], lr, float("-inf"))
            sorted_l = masked.sort(descending=True).values
            e = torch.exp(sorted_l - row_max)
            first = int((e.cumsum(0) >= top_p * e.sum()).nonzero()[0])
            keep[row] &= lr >= sorted_l[first]
        min_p = float(t.min_p[row])
        if min_p > 0.0:
            keep[row] &= torch.exp(lr - row_max) >= min_p
    return torch.where(keep, x, float("-inf"))


def sample_reference(logits: torch.Tensor, t: SamplingTensors) -> torch.Tensor:
    """[B, V] logits -> [B] int64 token ids."""
    x = process_logits_reference(logits, t)
    u = philox_uniform(t.seeds, t.steps, x.shape[1])
    gumbel = x - torch.log(-torch.log(u))
    greedy = (t.temperature <= 0)[:, None]
    return torch.where(greedy, x, gumbel).argmax(dim=1)
