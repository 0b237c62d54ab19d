"""A model runner whose forward pass computes nothing, for timing the host work of a step.

Everything `ModelRunner` does on the host runs for real (input preparation, the persistent
batch, the row selection, the sampler and its bookkeeping); the model is replaced by one that
returns ready-made hidden states and tiny logits. `MockModelRunner` instead skips preparation
and sampling altogether (it serves the frontend benchmarks). Used by `bench engine-step`.
"""

from __future__ import annotations

import torch

from hybridllm.config import EngineConfig
from hybridllm.executor.kv_cache import num_kv_blocks
from hybridllm.executor.model_runner import ModelRunner
from hybridllm.step_types import TokenSampler

_FAKE_VOCAB = 16  # logits width: argmax over it costs next to nothing


class FakeModel:
    """Returns [T, 1] hidden states and [rows, 16] logits whose argmax cycles with the row,
    so greedy sampling picks distinct, deterministic tokens without any model compute."""

    def __init__(self, max_rows: int) -> None:
        self.hidden = torch.zeros(max_rows, 1)
        self.logits = torch.zeros(max_rows, _FAKE_VOCAB)
        rows = torch.arange(max_rows)
        self.logits[rows, rows % _FAKE_VOCAB] = 1.0

    def __call__(
        self, input_ids: torch.Tensor, positions: object, kv_caches: object, meta: object,
        backend: object, keep: torch.Tensor | None = None,
    ) -> torch.Tensor:
        return self.hidden[: input_ids.shape[0] if keep is None else keep.shape[0]]

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.logits[: hidden.shape[0]]


class FakeForwardRunner(ModelRunner):
    def __init__(self, config: EngineConfig, sampler: TokenSampler) -> None:
        # ModelRunner's host state, without loading a model or allocating a KV cache.
        self._init_host(config, sampler)
        self.model = FakeModel(config.scheduler.max_num_batched_tokens)
        self.backend = None
        self.kv_caches = []
        self.graphs = None
        self.num_blocks = num_kv_blocks(config)
