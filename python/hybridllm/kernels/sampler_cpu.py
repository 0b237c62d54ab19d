"""Greedy sampling on CPU in C++ (csrc/sampling_cpu.cpp), built on first use: each row's
argmax with torch.argmax's choice among ties and NaNs, several times faster over a 49k
vocabulary. Elsewhere (another device, no compiler) torch.argmax."""

from __future__ import annotations

from functools import lru_cache
from types import ModuleType

import torch

from hybridllm.kernels.cpu_build import FAST_MATH, build


@lru_cache(maxsize=1)
def load() -> ModuleType | None:
    return build("hybridllm_sampling_cpu", "sampling_cpu.cpp", FAST_MATH)


def argmax_rows(logits: torch.Tensor) -> torch.Tensor:
    """[rows, vocab] -> int64 [rows], torch.argmax(logits, dim=-1)."""
    takes = (
        logits.device.type == "cpu"
        and logits.dtype in (torch.float32, torch.bfloat16)
        and logits.dim() == 2
        and logits.shape[1] > 0
        and logits.stride(1) == 1
    )
    module = load() if takes else None
    return logits.argmax(dim=-1) if module is None else module.argmax_rows(logits)
