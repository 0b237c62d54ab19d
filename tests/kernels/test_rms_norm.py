"""Triton (add +) RMSNorm vs models.layers.

Both compute fp32 statistics and round at the same points, so the only difference is the
reduction order (~1e-7 relative): fp32 checks at 1e-5. In fp16/bf16 that can flip the rounding
of the normalized row where it sits on a midpoint; one ulp there (2^-10 / 2^-7 relative)
carried through the weight multiply, plus that product's own rounding, gives 2e-3 / 1.6e-2.
The residual sum must match exactly.
"""

from __future__ import annotations

import pytest
import torch

from hybridllm.kernels.rms_norm import add_rms_norm, rms_norm
from hybridllm.models import layers

requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
RTOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}


def _check(rows: int, hidden: int, dtype: torch.dtype, device: torch.device) -> None:
    g = torch.Generator().manual_seed(3)
    x = torch.randn(rows, hidden, generator=g).to(dtype).to(device)
    residual = torch.randn(rows, hidden, generator=g).to(dtype).to(device)
    weight = (1 + 0.1 * torch.randn(hidden, generator=g)).to(dtype).to(device)
    eps = 1e-6
    tol = {"atol": 1e-5, "rtol": RTOL[dtype]}

    torch.testing.assert_close(rms_norm(x, weight, eps), layers.rms_norm(x, weight, eps), **tol)

    ref_out, ref_res = layers.add_rms_norm(x, residual, weight, eps)
    res = residual.clone()
    out, new_res = add_rms_norm(x, res, weight, eps)
    assert new_res.data_ptr() == res.data_ptr(), "residual is updated in place"
    assert torch.equal(new_res, ref_res)
    torch.testing.assert_close(out, ref_out, **tol)

    # Fully in place: normalized output written over x.
    x_inplace, res = x.clone(), residual.clone()
    add_rms_norm(x_inplace, res, weight, eps, out=x_inplace)
    torch.testing.assert_close(x_inplace, ref_out, **tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("hidden", [64, 200])
def test_rms_norm(dtype: torch.dtype, hidden: int, device: torch.device) -> None:
    _check(5, hidden, dtype, device)


@requires_cuda
def test_rms_norm_cuda_bf16(device: torch.device) -> None:
    _check(300, 4096, torch.bfloat16, device)
