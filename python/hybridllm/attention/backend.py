"""The attention backend interface and its selection by device."""

from __future__ import annotations

from typing import Protocol

import torch

from hybridllm.step_types import AttentionMetadata


class AttentionBackend(Protocol):
    """Reads and writes one layer's paged KV cache.

    key_cache / value_cache: [num_blocks, block_size, num_kv_heads, head_dim].
    query: [T, num_heads, head_dim]; key / value: [T, num_kv_heads, head_dim].
    window: a sliding-window layer's W (the query at position p attends to keys p - W + 1 .. p);
    None for full causal attention.
    """

    name: str

    def write_kv(
        self,
        key: torch.Tensor,
        value: torch.Tensor,
        key_cache: torch.Tensor,
        value_cache: torch.Tensor,
        slot_mapping: torch.Tensor,
    ) -> None: ...

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
        """key / value: this step's new keys and values (already written to the cache),
        which a backend may read directly where a sequence has no cached prefix."""
        ...


def get_attention_backend(device: torch.device, name: str | None = None) -> AttentionBackend:
    """`name` forces a backend ("torch" or "triton"); by default Triton on CUDA, torch elsewhere."""
    name = name or ("triton" if device.type == "cuda" else "torch")
    if name == "torch":
        from hybridllm.attention.torch_ref import TorchAttentionBackend

        return TorchAttentionBackend()
    if name == "triton":
        from hybridllm.attention.triton_backend import TritonAttentionBackend

        return TritonAttentionBackend()
    raise ValueError(f"unknown attention backend {name!r} (choose torch or triton)")
