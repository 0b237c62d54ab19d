"""The fp32 CPU linear kernel over column panels (csrc/linear_cpu.cpp), built on first use.

For the few-row GEMMs of decoding (one row per sequence, 1 + k with speculative drafts): it
streams the weight once per call whatever the row count up to a tile, and a row's result is
the same bits whatever else is in the batch. `linear_reference` is the plain torch version the
tests compare against.
"""

from __future__ import annotations

from functools import lru_cache
from types import ModuleType

import torch

from hybridllm.kernels.cpu_build import OPENMP, build

LANES = 16  # output columns per panel

# No fast-math: every output must be one sum over k in order, whichever tile height the
# compiler instantiates, so that results do not depend on the batch.
_CFLAGS = ["-O3", "-march=native", *OPENMP]


@lru_cache(maxsize=1)
def load() -> ModuleType | None:
    return build("hybridllm_linear_cpu", "linear_cpu.cpp", _CFLAGS)


def pack(weight: torch.Tensor) -> torch.Tensor:
    """[N, K] fp32 weight -> [ceil(N / 16), K, 16] panels (zero columns past N)."""
    module = load()
    assert module is not None
    return module.pack(weight.detach().contiguous())


def linear(x: torch.Tensor, panels: torch.Tensor, out_features: int,
           bias: torch.Tensor | None) -> torch.Tensor:
    """x [M, K] contiguous fp32 -> x W^T (+ bias) [M, out_features]."""
    module = load()
    assert module is not None
    return module.linear(x, panels, out_features, bias)


def linear_reference(x: torch.Tensor, panels: torch.Tensor, out_features: int,
                     bias: torch.Tensor | None) -> torch.Tensor:
    """The same product in torch, from the panels (fp64 accumulation: the tests' oracle)."""
    weight = panels.transpose(1, 2).reshape(-1, panels.shape[1])[:out_features]
    y = x.double() @ weight.double().T
    if bias is not None:
        y = y + bias.double()
    return y.to(x.dtype)
