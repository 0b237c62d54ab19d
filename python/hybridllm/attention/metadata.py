"""What one forward pass tells attention about its flat token batch."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass
class AttentionMetadata:
    """A flat batch of T query tokens from B sequences, grouped by sequence in order.

    Sequence i owns query rows cu_seqlens_q[i]:cu_seqlens_q[i+1]; they sit at the last
    query_len positions of its seq_lens[i] keys (the earlier ones are already cached), so one
    batch can mix whole prompts, prefill chunks on top of a cached prefix, and decode tokens.
    """

    slot_mapping: torch.Tensor  # [T] int64: cache slot (block * block_size + offset); -1 = skip
    cu_seqlens_q: torch.Tensor  # [B + 1] int32
    seq_lens: torch.Tensor  # [B] int32: keys per sequence after this step
    block_tables: torch.Tensor  # [B, max_blocks] int32: physical block of each logical block
    max_seqlen_q: int
    max_seqlen_k: int
    # Host copies, so backends can plan without a device sync.
    query_lens_host: list[int]
    seq_lens_host: list[int]
    # Per-step work a backend derives once and reuses in every layer (index plans, masks).
    backend_state: dict[str, Any] = field(default_factory=dict)

    @property
    def num_seqs(self) -> int:
        return len(self.seq_lens_host)

    @property
    def is_pure_decode(self) -> bool:
        return self.max_seqlen_q == 1
