"""The default token budget per step (max_num_batched_tokens when not given)."""

from __future__ import annotations

import torch

from hybridllm.config import (
    CPU_BATCHED_TOKENS,
    CPU_PREFILL_FLOOR,
    EngineArgs,
    default_batched_tokens,
)

CPU, CUDA = torch.device("cpu"), torch.device("cuda")


def test_defaults_by_device_task_and_chunking() -> None:
    assert CPU_BATCHED_TOKENS == 384
    assert CPU_PREFILL_FLOOR == 128
    assert default_batched_tokens(CPU, "generate", True, 2048, 256) == 384
    assert default_batched_tokens(CPU, "generate", True, 2048, 16) == 384
    # Never below a decode token for every sequence a step may hold plus 128 prompt tokens,
    # so a full batch still prefills.
    assert default_batched_tokens(CPU, "generate", True, 2048, 1000) == 1128
    assert default_batched_tokens(CPU, "generate", True, 2048, 448) == 576
    assert default_batched_tokens(CUDA, "generate", True, 2048, 256) == 2048
    # An encoder input is never split: embedding models keep the larger budget.
    assert default_batched_tokens(CPU, "embed", True, 512, 256) == 2048
    # Without chunked prefill a whole prompt must fit in one step.
    assert default_batched_tokens(CPU, "generate", False, 8192, 256) == 8192
    assert default_batched_tokens(CPU, "generate", False, 1024, 256) == 2048


def test_the_bundled_model_on_cpu_and_an_explicit_budget() -> None:
    # The same budget in both dtypes (dtype auto is fp32 on CPU).
    assert EngineArgs(device="cpu").resolve().scheduler.max_num_batched_tokens == 384
    bf16 = EngineArgs(device="cpu", dtype="bfloat16").resolve()
    assert bf16.scheduler.max_num_batched_tokens == 384
    explicit = EngineArgs(device="cpu", max_num_batched_tokens=2048).resolve()
    assert explicit.scheduler.max_num_batched_tokens == 2048
