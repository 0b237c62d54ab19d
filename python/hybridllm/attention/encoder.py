"""Bidirectional attention over a packed batch of whole sequences (encoder models, no cache).

Sequence i's rows cu_seqlens[i]:cu_seqlens[i+1] attend to each other only. Two layouts:

- per sequence: one scaled_dot_product_attention call per sequence on its own rows. On CPU
  this is the fastest (2,031 tokens in 53 sequences of 5-130 tokens, 12 heads of 32, one
  thread: 12 ms a layer, against 93 ms padded to the longest with a key mask and 156 ms for
  one call with a [T, T] block-diagonal mask, which computes every cross-sequence score).
- padded: the sequences scattered into [B, max_len] with a key-padding mask, one call. On
  CUDA one launch beats B small ones; the padded rows cost little there.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.nn.functional as F

from hybridllm.step_types import EncoderMetadata


def encoder_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, meta: EncoderMetadata, scale: float
) -> torch.Tensor:
    """q, k, v: [T, heads, head_dim] -> [T, heads, head_dim]."""
    if q.device.type == "cpu":
        return per_sequence_attention(q, k, v, meta, scale)
    return padded_attention(q, k, v, meta, scale)


@contextmanager
def _one_thread(device: torch.device) -> Iterator[None]:
    """Intra-op parallelism off on CPU: a call here is too small to split (12 heads of a
    ~50-token sequence), and each parallel region ends in a barrier that, on a busy machine,
    waits out a scheduler time slice: 200 sentences took 16.0 s with 2 threads inside these
    calls, 6.8 s with 1 (the GEMMs keep every thread)."""
    n = torch.get_num_threads()
    if device.type != "cpu" or n == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(n)


def per_sequence_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, meta: EncoderMetadata, scale: float
) -> torch.Tensor:
    cu = meta.cu_seqlens_host
    if meta.num_seqs == 1:
        o = F.scaled_dot_product_attention(
            q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), scale=scale
        )
        return o.transpose(0, 1)
    out = torch.empty_like(q)
    with _one_thread(q.device):
        for i in range(meta.num_seqs):
            s, e = cu[i], cu[i + 1]
            o = F.scaled_dot_product_attention(
                q[s:e].transpose(0, 1), k[s:e].transpose(0, 1), v[s:e].transpose(0, 1),
                scale=scale,
            )
            out[s:e] = o.transpose(0, 1)
    return out


def _padded_plan(meta: EncoderMetadata, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """(padded slot of each flat row [T], key mask [B, 1, 1, max_len]), made once per step."""
    plan = meta.backend_state.get("padded")
    if plan is None:
        lens = torch.tensor(meta.seq_lens_host, device=device)
        seq = torch.repeat_interleave(torch.arange(meta.num_seqs, device=device), lens)
        starts = meta.cu_seqlens[:-1].to(device)
        pos = torch.arange(seq.numel(), device=device) - starts[seq]
        slots = seq * meta.max_seqlen + pos
        mask = torch.arange(meta.max_seqlen, device=device)[None, :] < lens[:, None]
        plan = meta.backend_state["padded"] = (slots, mask[:, None, None, :])
    return plan


def padded_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, meta: EncoderMetadata, scale: float
) -> torch.Tensor:
    slots, mask = _padded_plan(meta, q.device)
    b, n, (_, heads, dim) = meta.num_seqs, meta.max_seqlen, q.shape

    def pad(x: torch.Tensor) -> torch.Tensor:
        buf = x.new_zeros(b * n, heads, dim)
        buf[slots] = x
        return buf.view(b, n, heads, dim).transpose(1, 2)

    o = F.scaled_dot_product_attention(pad(q), pad(k), pad(v), attn_mask=mask, scale=scale)
    return o.transpose(1, 2).reshape(b * n, heads, dim)[slots]
