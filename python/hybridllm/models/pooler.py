"""Pooling of a packed batch of encoder hidden states: one vector per sequence, as
sentence-transformers' Pooling computes it (then L2 normalization, per row, where asked)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from hybridllm.step_types import EncoderMetadata


def pool(hidden: torch.Tensor, meta: EncoderMetadata, pooling_type: str) -> torch.Tensor:
    """hidden: [T, H] rows grouped by sequence -> [B, H] in fp32."""
    cu = meta.cu_seqlens
    if pooling_type == "cls":
        return hidden.index_select(0, cu[:-1]).float()
    if pooling_type == "lasttoken":
        return hidden.index_select(0, cu[1:] - 1).float()
    lens = torch.tensor(meta.seq_lens_host, device=hidden.device)
    if pooling_type == "max":
        return torch.segment_reduce(hidden.float(), "max", lengths=lens, axis=0)
    seq = torch.repeat_interleave(torch.arange(meta.num_seqs, device=hidden.device), lens)
    sums = torch.zeros(meta.num_seqs, hidden.shape[1], dtype=torch.float32, device=hidden.device)
    sums.index_add_(0, seq, hidden.float())
    counts = lens.to(torch.float32)[:, None]
    if pooling_type == "mean":
        return sums / counts
    if pooling_type == "mean_sqrt_len_tokens":
        return sums / counts.sqrt()
    raise ValueError(f"unknown pooling type {pooling_type!r}")


def normalize_rows(pooled: torch.Tensor, rows: list[bool]) -> torch.Tensor:
    """L2-normalize the rows marked True (sentence-transformers' Normalize: eps 1e-12)."""
    if not any(rows):
        return pooled
    normalized = F.normalize(pooled, p=2.0, dim=-1)
    if all(rows):
        return normalized
    mask = torch.tensor(rows, device=pooled.device)[:, None]
    return torch.where(mask, normalized, pooled)
