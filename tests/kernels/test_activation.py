"""Triton SiLU-and-mul vs models.layers.silu_and_mul. Same rounding points, but exp may differ
by an fp32 ulp (hence 1e-6 relative), which can flip the intermediate fp16/bf16 rounding of
silu(gate) when it sits on a midpoint: one ulp of silu (up to 2^-10 / 2^-7 relative) carried
into the product plus the product's own rounding (2^-11 / 2^-8) gives 2e-3 / 1.6e-2."""

from __future__ import annotations

import pytest
import torch

from hybridllm.kernels.activation import silu_and_mul
from hybridllm.models import layers

requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
RTOL = {torch.float32: 1e-6, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}


def _check(rows: int, inter: int, dtype: torch.dtype, device: torch.device) -> None:
    g = torch.Generator().manual_seed(4)
    gate_up = (3 * torch.randn(rows, 2 * inter, generator=g)).to(dtype).to(device)
    torch.testing.assert_close(
        silu_and_mul(gate_up), layers.silu_and_mul(gate_up), atol=1e-6, rtol=RTOL[dtype]
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_silu_and_mul(dtype: torch.dtype, device: torch.device) -> None:
    _check(7, 300, dtype, device)


@requires_cuda
def test_silu_and_mul_cuda_bf16(device: torch.device) -> None:
    _check(257, 8192, torch.bfloat16, device)
