"""The decoder layer's elementwise ops in C++ on CPU (csrc/layer_ops_cpu.cpp), built on first
use: the CPU implementation of models.layers.LayerOps, which models/fused_ops.py selects.

Each is one pass over the rows (torch's versions are 5-12 ops with fp32 temporaries); same
results as the torch functions in models/layers.py up to fp32 summation order. add_rms_norm
updates the residual in place and rotary_qk rotates q and k in place.
"""

from __future__ import annotations

from functools import lru_cache
from types import ModuleType

import torch

from hybridllm.kernels.cpu_build import FAST_MATH, build


@lru_cache(maxsize=1)
def load() -> ModuleType | None:
    return build("hybridllm_layer_ops_cpu", "layer_ops_cpu.cpp", FAST_MATH)


def _module() -> ModuleType:
    module = load()
    assert module is not None
    return module


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """x [..., N] -> rms_norm(x) * weight, a new tensor of x's shape."""
    return _module().rms_norm(x.reshape(-1, x.shape[-1]), weight, eps).view(x.shape)


def add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """residual += x in place; returns (rms_norm(residual) * weight, residual)."""
    return _module().add_rms_norm(x, residual, weight, eps), residual


def silu_and_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """[T, 2I] -> silu(gate) * up, a new contiguous [T, I] tensor (the next GEMM's input)."""
    return _module().silu_and_mul(gate_up)


def rotary_qk(
    q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor, cos_sin: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotate-half RoPE on q [T, H, D] and k [T, Hkv, D] in place; returns them."""
    _module().rotary_qk_(q, k, positions, cos_sin)
    return q, k
