"""Building blocks of the Llama family as small pure functions (torch reference versions).

The model calls them through a `LayerOps` table chosen once at build time
(`hybridllm.models.fused_ops.select_layer_ops`): the fused C++ ops on CPU, fused Triton kernels on
CUDA, or `TORCH_OPS` (these functions) where neither can run; all give the same results. These
stay the oracle that the kernel tests compare against.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    orig_dtype = x.dtype
    x = x.float()
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return weight * x.to(orig_dtype)


def gemma_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Gemma's RMSNorm: the gain is 1 + weight (checkpoints store the offset from 1), and the
    product is taken in fp32 before rounding to x's dtype (Llama rounds first)."""
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (xf * (1.0 + weight.float())).to(x.dtype)


def gelu_tanh_and_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """Gemma's gated MLP activation: gelu(gate) (tanh approximation) * up."""
    gate, up = gate_up.chunk(2, dim=-1)
    return F.gelu(gate, approximate="tanh") * up


def add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """residual += x; return (rms_norm(residual), residual)."""
    residual = residual + x
    return rms_norm(residual, weight, eps), residual


def silu_and_mul(gate_up: torch.Tensor) -> torch.Tensor:
    gate, up = gate_up.chunk(2, dim=-1)
    return F.silu(gate) * up


def silu_and_mul_inplace(gate_up: torch.Tensor) -> torch.Tensor:
    """silu_and_mul computed in gate_up's first half: the same two roundings, no new tensors
    (on CPU a fresh [tokens, intermediate] buffer per layer costs page faults). Returns a view."""
    gate, up = gate_up.chunk(2, dim=-1)
    return F.silu(gate, inplace=True).mul_(up)


def apply_rotary(
    x: torch.Tensor, positions: torch.Tensor, cos_sin: torch.Tensor
) -> torch.Tensor:
    """Rotate-half RoPE. x: [T, heads, head_dim]; cos_sin: [max_pos, head_dim] (cos | sin)."""
    cos, sin = cos_sin.index_select(0, positions).unsqueeze(1).chunk(2, dim=-1)
    return _rotate(x, cos, sin)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.float().chunk(2, dim=-1)
    out = torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)
    return out.to(x.dtype)


def rotary_qk(
    q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor, cos_sin: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """RoPE on q [T, H, D] and k [T, Hkv, D]; returns new tensors (the fused op may not).
    The positions' cos / sin rows are gathered once for both."""
    cos, sin = cos_sin.index_select(0, positions).unsqueeze(1).chunk(2, dim=-1)
    return _rotate(q, cos, sin), _rotate(k, cos, sin)


@dataclass(frozen=True)
class LayerOps:
    """The elementwise ops of a decoder layer. Fused implementations may update add_rms_norm's
    residual and rotary_qk's q / k in place, so callers must not reuse those inputs."""

    name: str
    rms_norm: Callable[[torch.Tensor, torch.Tensor, float], torch.Tensor]
    add_rms_norm: Callable[
        [torch.Tensor, torch.Tensor, torch.Tensor, float], tuple[torch.Tensor, torch.Tensor]
    ]
    silu_and_mul: Callable[[torch.Tensor], torch.Tensor]
    rotary_qk: Callable[
        [torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]
    ]


# The model's gate_up output is a temporary, so its activation can be done in place.
TORCH_OPS = LayerOps("torch", rms_norm, add_rms_norm, silu_and_mul_inplace, rotary_qk)


def rope_inv_freq(head_dim: int, theta: float, scaling: dict | None) -> torch.Tensor:
    """Inverse frequencies with the config's rope scaling (default, linear, llama3)."""
    # float32 throughout, as transformers computes it, so greedy parity is exact.
    exponents = torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim
    inv_freq = 1.0 / (theta**exponents)
    kind = (scaling or {}).get("rope_type") or (scaling or {}).get("type") or "default"
    if kind == "default":
        return inv_freq
    if kind == "linear":
        return inv_freq / float(scaling["factor"])
    if kind == "llama3":
        factor = float(scaling["factor"])
        low = float(scaling.get("low_freq_factor", 1.0))
        high = float(scaling.get("high_freq_factor", 4.0))
        old_ctx = float(scaling["original_max_position_embeddings"])
        wavelen = 2 * math.pi / inv_freq
        smooth = (old_ctx / wavelen - low) / (high - low)
        scaled = torch.where(wavelen > old_ctx / low, inv_freq / factor, inv_freq)
        mid = (wavelen <= old_ctx / low) & (wavelen >= old_ctx / high)
        blended = (1 - smooth) * inv_freq / factor + smooth * inv_freq
        return torch.where(mid, blended, scaled)
    raise ValueError(f"unsupported rope scaling type {kind!r}")


def rope_cos_sin(
    head_dim: int, max_positions: int, theta: float, scaling: dict | None
) -> torch.Tensor:
    inv_freq = rope_inv_freq(head_dim, theta, scaling)
    t = torch.arange(max_positions, dtype=torch.float32)
    freqs = torch.outer(t, inv_freq)
    return torch.cat((freqs.cos(), freqs.sin()), dim=-1)
