"""The C++ panel linear kernel against its torch reference, and its batch invariance."""

from __future__ import annotations

import pytest
import torch

from hybridllm.kernels import linear_cpu
from hybridllm.models.cpu_linear import PANEL_ROWS, PackedLinear


def test_kernel_builds() -> None:
    assert linear_cpu.load() is not None


def test_pack_layout() -> None:
    """Panel p, row k, lane j holds W[16 p + j, k]; columns past N are zero."""
    weight = torch.arange(35 * 3, dtype=torch.float32).view(35, 3)
    panels = linear_cpu.pack(weight)
    assert panels.shape == (3, 3, 16)
    assert panels[1, 2, 5].item() == weight[21, 2].item()
    assert panels[2, 0, 2].item() == weight[34, 0].item()
    assert torch.count_nonzero(panels[2, :, 3:]).item() == 0


# N: whole panels, whole pairs of panels, a ragged last panel, fewer than one panel.
# M: every tile height on AVX-512 (8) and AVX2 (6), and several tiles.
@pytest.mark.parametrize("n, k", [(64, 32), (48, 96), (35, 3), (7, 576), (960, 576)])
@pytest.mark.parametrize("m", [1, 2, 3, 5, 6, 7, 8, 9, 13, 17])
@pytest.mark.parametrize("with_bias", [False, True])
def test_matches_reference(n: int, k: int, m: int, with_bias: bool) -> None:
    gen = torch.Generator().manual_seed(n * 1000 + k * 10 + m)
    weight = torch.randn(n, k, generator=gen)
    bias = torch.randn(n, generator=gen) if with_bias else None
    x = torch.randn(m, k, generator=gen)
    panels = linear_cpu.pack(weight)
    out = linear_cpu.linear(x, panels, n, bias)
    ref = linear_cpu.linear_reference(x, panels, n, bias)
    assert out.shape == (m, n)
    # A serial fp32 sum of k products (and the bias): each element within the classic bound
    # (k + 1) u sum|x w| (+ |b|), u = 2^-24. A wrong index or a dropped term is far outside.
    magnitude = x.abs().double() @ weight.abs().double().T
    if bias is not None:
        magnitude += bias.abs().double()
    bound = (k + 1) * 2.0**-24 * magnitude
    assert bool(((out.double() - ref.double()).abs() <= bound).all())


def test_rows_do_not_depend_on_the_batch() -> None:
    """Row i's output is the same bits alone, in any tile height, and at any place in it."""
    gen = torch.Generator().manual_seed(1)
    weight = torch.randn(200, 576, generator=gen)
    panels = linear_cpu.pack(weight)
    x = torch.randn(17, 576, generator=gen)
    whole = linear_cpu.linear(x, panels, 200, None)
    for i in range(17):
        alone = linear_cpu.linear(x[i : i + 1].contiguous(), panels, 200, None)
        assert torch.equal(alone[0], whole[i]), i
    shifted = linear_cpu.linear(x[3:].contiguous(), panels, 200, None)
    assert torch.equal(shifted, whole[3:])


def test_packed_linear_takes_small_calls_through_the_panels() -> None:
    """PackedLinear: up to PANEL_ROWS rows the panel kernel's bits, beyond it oneDNN's; both
    the same product."""
    gen = torch.Generator().manual_seed(2)
    weight, bias = torch.randn(96, 64, generator=gen), torch.randn(96, generator=gen)
    layer = PackedLinear(weight, bias, PANEL_ROWS)
    assert layer.panels is not None
    half = PANEL_ROWS // 2
    small = torch.randn(2, half, 64, generator=gen)  # 3-D input: flattened to PANEL_ROWS rows
    out = layer(small)
    assert out.shape == (2, half, 96)
    rows = small.reshape(-1, 64)
    assert torch.equal(out.reshape(-1, 96), linear_cpu.linear(rows, layer.panels, 96, bias))
    big = torch.randn(PANEL_ROWS + 1, 64, generator=gen)
    ref = big.double() @ weight.double().T + bias.double()
    torch.testing.assert_close(layer(big).double(), ref, rtol=0, atol=1e-4)
    torch.testing.assert_close(out.double().reshape(-1, 96), rows.double() @ weight.double().T
                               + bias.double(), rtol=0, atol=1e-4)
    assert PackedLinear(weight, bias).panels is None  # panel_rows 0: oneDNN only
