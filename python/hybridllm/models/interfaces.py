"""What the engine outside models/ may know of a model: its config's sizes and the causal LM's
methods. The runner, KV cache, CUDA graphs and sampler are typed by these protocols, never by
a concrete model class or config (models/registry.py picks those by architecture)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

import torch

from hybridllm.attention import AttentionBackend
from hybridllm.models.layers import LayerOps
from hybridllm.step_types import AttentionMetadata


class ModelConfig(Protocol):
    """Read from config.json; the fields every model has (decoder or encoder)."""

    @property
    def architecture(self) -> str: ...
    @property
    def vocab_size(self) -> int: ...
    @property
    def hidden_size(self) -> int: ...
    @property
    def max_positions(self) -> int:
        """The longest input the model's positions allow."""
        ...


class DecoderConfig(ModelConfig, Protocol):
    """A generative model's sizes: what the KV cache, tensor-parallel checks, sampler and
    tokenizer hand-off read. The engine's dtype is the engine's (EngineConfig.dtype)."""

    @property
    def num_hidden_layers(self) -> int: ...
    @property
    def num_attention_heads(self) -> int: ...
    @property
    def num_key_value_heads(self) -> int: ...
    @property
    def head_dim(self) -> int: ...
    @property
    def intermediate_size(self) -> int: ...
    @property
    def bos_token_id(self) -> int | None: ...
    @property
    def eos_token_ids(self) -> tuple[int, ...]: ...

    def layer_window(self, layer: int) -> int | None:
        """The layer's sliding window (None: full attention)."""
        ...

    def verify(self, max_model_len: int) -> None:
        """Refuse (ValueError) what this engine cannot run at this context length."""
        ...


class CausalLM(Protocol):
    """A decoder over the paged KV cache (models/llama.py and its variants)."""

    cfg: DecoderConfig

    @property
    def dtype(self) -> torch.dtype:
        """The weights' (and so the hidden states') dtype."""
        ...

    def __call__(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        kv_caches: list[torch.Tensor],
        meta: AttentionMetadata,
        backend: AttentionBackend,
        keep: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Hidden states [T, hidden] of a flat batch of tokens; with `keep` (row indices,
        ascending), those rows only: the last layer's MLP runs on them alone."""
        ...

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """fp32 logits [rows, vocab] of these hidden rows (gathered over TP ranks)."""
        ...

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None: ...
    def set_layer_ops(self, ops: LayerOps) -> None: ...
    def pack_for_cpu(self) -> None: ...
