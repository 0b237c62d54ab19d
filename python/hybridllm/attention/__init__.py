"""Attention over the paged KV cache, behind one backend interface (torch reference, Triton)."""

from hybridllm.attention.backend import AttentionBackend, get_attention_backend
from hybridllm.attention.metadata import AttentionMetadata

__all__ = ["AttentionBackend", "AttentionMetadata", "get_attention_backend"]
