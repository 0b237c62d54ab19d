"""The fused implementations of models.layers.LayerOps: Triton kernels (the CUDA path) and C++
ones (the CPU path, kernels/layer_ops_cpu.py).

Same results as layers.TORCH_OPS up to fp32 rounding order; add_rms_norm updates the residual
in place and rotary_qk rotates q and k in place (both are views of the fused qkv projection's
output, which the Llama forward does not reuse).
"""

from __future__ import annotations

import torch

from hybridllm.models.layers import TORCH_OPS, LayerOps


def _rotary_qk(
    q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor, cos_sin: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    from hybridllm.kernels.rotary import rotary_embedding_

    rotary_embedding_(q, k, positions, cos_sin)
    return q, k


def triton_ops() -> LayerOps:
    # Imported here: importing the kernel modules imports Triton, which the CPU path avoids.
    from hybridllm.kernels.activation import silu_and_mul
    from hybridllm.kernels.rms_norm import add_rms_norm, rms_norm

    return LayerOps("triton", rms_norm, add_rms_norm, silu_and_mul, _rotary_qk)


def cpu_ops() -> LayerOps | None:
    """The C++ CPU ops, or None where they could not be built."""
    from hybridllm.kernels import layer_ops_cpu as k

    if k.load() is None:
        return None
    return LayerOps("cpu", k.rms_norm, k.add_rms_norm, k.silu_and_mul, k.rotary_qk)


def select_layer_ops(device: torch.device, attention_backend: str) -> LayerOps:
    """Triton kernels on CUDA or whenever attention runs in Triton (e.g. the CPU interpreter in
    tests); the C++ ones on CPU; the torch functions where neither can run."""
    from hybridllm.kernels import triton_usable

    if device.type == "cuda" or attention_backend == "triton":
        return triton_ops() if triton_usable() else TORCH_OPS
    return (cpu_ops() if device.type == "cpu" else None) or TORCH_OPS
