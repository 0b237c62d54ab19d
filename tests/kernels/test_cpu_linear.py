"""oneDNN-packed linear layers (models/cpu_linear.py) against torch's F.linear."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from hybridllm.models import cpu_linear

pytestmark = pytest.mark.skipif(
    not cpu_linear.available(torch.float32), reason="torch built without oneDNN"
)


@pytest.mark.parametrize("rows", [1, 7, 64, 300])
@pytest.mark.parametrize("bias", [False, True])
def test_matches_f_linear(rows: int, bias: bool) -> None:
    gen = torch.Generator().manual_seed(rows)
    weight = torch.randn(96, 80, generator=gen)
    b = torch.randn(96, generator=gen) if bias else None
    x = torch.randn(rows, 80, generator=gen)
    layer = cpu_linear.PackedLinear(weight, b)
    # fp32 either way, another summation order: a few ulps of outputs of order 10.
    torch.testing.assert_close(layer(x), F.linear(x, weight, b), rtol=1e-5, atol=1e-5)


def test_strided_and_batched_inputs() -> None:
    gen = torch.Generator().manual_seed(0)
    weight = torch.randn(32, 48, generator=gen)
    layer = cpu_linear.PackedLinear(weight, None)
    wide = torch.randn(10, 96, generator=gen)
    view = wide[:, :48]  # a non-contiguous view, as silu_and_mul's in-place result is
    torch.testing.assert_close(layer(view), F.linear(view, weight), rtol=1e-5, atol=1e-5)
    x3 = torch.randn(2, 5, 48, generator=gen)
    out = layer(x3)
    assert out.shape == (2, 5, 32)
    torch.testing.assert_close(out, F.linear(x3, weight), rtol=1e-5, atol=1e-5)


def test_pack_linears_replaces_every_linear() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 24), nn.ReLU(), nn.Sequential(nn.Linear(24, 8, bias=False)))
    x = torch.randn(4, 16)
    with torch.inference_mode():
        ref = model(x)
        assert cpu_linear.pack_linears(model) == 2
        assert not any(isinstance(m, nn.Linear) for m in model.modules())
        torch.testing.assert_close(model(x), ref, rtol=1e-5, atol=1e-5)
