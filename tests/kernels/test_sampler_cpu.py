"""The C++ greedy sampler (kernels/sampler_cpu): torch.argmax's answer on every row, ties,
NaNs and infinities included."""

from __future__ import annotations

import pytest
import torch

from hybridllm.kernels import sampler_cpu


def test_kernel_builds() -> None:
    assert sampler_cpu.load() is not None


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("vocab", [1, 7, 16, 17, 49152, 49155])
def test_matches_torch_argmax(dtype: torch.dtype, vocab: int) -> None:
    gen = torch.Generator().manual_seed(vocab)
    x = torch.randn(9, vocab, generator=gen).to(dtype)
    x[1] = float("-inf")  # every value -inf: index 0
    x[2, vocab // 2] = float("nan")  # a NaN beats everything
    x[3, -1] = float("nan")
    x[3, vocab // 3] = float("nan")  # the first NaN wins
    x[4] = 0.5  # all equal: the first
    x[5, -1] = float("inf")
    x[6, vocab // 3] = x[6, -1] = 1e4  # tied maxima in different lanes: the first
    x[7, 0] = x[7, -1] = 1e4
    want = x.argmax(dim=-1)
    got = sampler_cpu.argmax_rows(x)
    assert got.dtype == torch.int64 and got.shape == (9,)
    assert got.tolist() == want.tolist()


def test_strided_rows_and_fallbacks() -> None:
    gen = torch.Generator().manual_seed(1)
    wide = torch.randn(5, 300, generator=gen)
    rows = wide[:, 40:240]  # rows 300 apart, 200 wide
    assert sampler_cpu.argmax_rows(rows).tolist() == rows.argmax(dim=-1).tolist()
    # What the kernel does not take goes to torch: another dtype, a strided last dim.
    half = wide.half()
    assert sampler_cpu.argmax_rows(half).tolist() == half.argmax(dim=-1).tolist()
    cols = wide.t()
    assert sampler_cpu.argmax_rows(cols).tolist() == cols.argmax(dim=-1).tolist()
    assert sampler_cpu.argmax_rows(torch.empty(0, 10)).tolist() == []
