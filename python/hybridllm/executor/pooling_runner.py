"""Runs one pooling step: a packed batch of whole inputs, the encoder, pooling, normalization.

Inputs are concatenated into one flat [T] token batch without padding (cu_seqlens marks each
sequence); the linear layers see all T rows at once and attention stays within each sequence
(attention/encoder.py). Nothing is cached between steps.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import torch

from hybridllm.config import EngineConfig
from hybridllm.executor.cpu_env import keep_freed_memory
from hybridllm.models import cpu_linear
from hybridllm.models.loader import load_encoder
from hybridllm.models.pooler import normalize_rows, pool
from hybridllm.step_types import EncoderMetadata, PoolingSchedulerOutput


class PoolingRunner:
    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        self.device = config.device
        self.pooling_type: str = config.pooler.pooling_type
        if self.device.type == "cpu":
            keep_freed_memory()
        torch.manual_seed(config.args.seed)
        load_format = "dummy" if config.args.load_format == "dummy" else "safetensors"
        self.model = load_encoder(
            config.model_path, config.model, config.dtype, self.device, load_format
        )
        if (
            self.device.type == "cpu"
            and cpu_linear.available(config.dtype)
            and not os.environ.get("HYBRIDLLM_DISABLE_CPU_KERNELS")
        ):
            self.model.pack_for_cpu()

    @property
    def hidden_size(self) -> int:
        return self.config.model.hidden_size

    def _tensor(self, values: list[int]) -> torch.Tensor:
        host = torch.tensor(values, dtype=torch.int64)
        if self.device.type == "cuda":
            return host.pin_memory().to(self.device, non_blocking=True)
        return host

    @torch.inference_mode()
    def execute(
        self, sched: PoolingSchedulerOutput, while_running: Callable[[], None] | None = None
    ) -> torch.Tensor:
        """[B, hidden] fp32 on the CPU, row i for sched.requests[i]. `while_running` is called
        once: on CUDA once the forward pass is queued, on CPU before it."""
        ids: list[int] = []
        positions: list[int] = []
        cu = [0]
        for request in sched.requests:
            ids.extend(request.prompt_token_ids)
            positions.extend(range(request.num_tokens))
            cu.append(len(ids))
        lens = [r.num_tokens for r in sched.requests]
        meta = EncoderMetadata(
            cu_seqlens=self._tensor(cu),
            seq_lens_host=lens,
            cu_seqlens_host=cu,
            max_seqlen=max(lens),
        )
        overlap = self.device.type == "cuda"
        if while_running is not None and not overlap:
            while_running()
        hidden = self.model(self._tensor(ids), self._tensor(positions), meta)
        pooled = pool(hidden, meta, self.pooling_type)
        pooled = normalize_rows(pooled, [r.normalize for r in sched.requests])
        if while_running is not None and overlap:
            while_running()
        return pooled.cpu()
