"""Attention over the paged KV cache, behind one backend interface (torch reference, Triton)."""

from hybridllm.attention.backend import AttentionBackend, get_attention_backend

__all__ = ["AttentionBackend", "get_attention_backend"]
