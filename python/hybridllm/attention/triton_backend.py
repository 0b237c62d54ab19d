"""The Triton attention backend: paged cache writes and unified / split-KV paged attention."""

from __future__ import annotations

import torch

from hybridllm.kernels.paged_attention import paged_attention
from hybridllm.kernels.reshape_and_cache import reshape_and_cache
from hybridllm.step_types import AttentionMetadata


class TritonAttentionBackend:
    """Plans from the metadata's host lists only, so each call is graph-capturable."""

    name = "triton"

    def write_kv(
        self,
        key: torch.Tensor,
        value: torch.Tensor,
        key_cache: torch.Tensor,
        value_cache: torch.Tensor,
        slot_mapping: torch.Tensor,
    ) -> None:
        reshape_and_cache(key, value, key_cache, value_cache, slot_mapping)

    def forward(
        self,
        query: torch.Tensor,
        key_cache: torch.Tensor,
        value_cache: torch.Tensor,
        meta: AttentionMetadata,
        scale: float,
        key: torch.Tensor | None = None,
        value: torch.Tensor | None = None,
        window: int | None = None,
    ) -> torch.Tensor:
        return paged_attention(query, key_cache, value_cache, meta, scale, window=window)
