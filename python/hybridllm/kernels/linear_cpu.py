"""The fp32 and bf16 CPU linear kernels over column panels (csrc/linear_cpu.cpp), built on
first use.

For the few-row GEMMs of decoding (one row per sequence, 1 + k with speculative drafts): it
streams the weight once per call whatever the row count up to a tile, and a row's result is
the same bits whatever else is in the batch. Where the CPU has AMX-BF16, bf16 calls run on
AMX tiles over the same panels (`amx_active`). `linear_reference` is the plain torch version the
tests compare against.
"""

from __future__ import annotations

from collections.abc import Callable
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


def packed_shape(out_features: int, in_features: int, dtype: torch.dtype) -> tuple[int, ...]:
    """The shape `pack` gives an [out_features, in_features] weight of this dtype."""
    panels = -(-out_features // LANES)
    if dtype == torch.bfloat16:
        return (panels, -(-in_features // 2), LANES, 2)
    return (panels, in_features, LANES)


def pack(weight: torch.Tensor) -> torch.Tensor:
    """[N, K] weight -> panels, zero columns past N: fp32 [ceil(N / 16), K, 16]; bf16
    [ceil(N / 16), ceil(K / 2), 16, 2] (a k pair per column, zero k past an odd K)."""
    module = load()
    assert module is not None
    weight = weight.detach().contiguous()
    return module.pack_bf16(weight) if weight.dtype == torch.bfloat16 else module.pack(weight)


def kernel_for(dtype: torch.dtype) -> Callable[..., torch.Tensor]:
    """The built kernel `linear` calls for x of this dtype, for a caller that makes many calls
    (the Python wrapper costs about as much as a one-row call's dispatch)."""
    module = load()
    assert module is not None
    return module.linear_bf16 if dtype == torch.bfloat16 else module.linear


def linear(x: torch.Tensor, panels: torch.Tensor, out_features: int,
           bias: torch.Tensor | None) -> torch.Tensor:
    """x [M, K] contiguous, the panels' dtype -> x W^T (+ bias) [M, out_features], summed in
    fp32 (bf16: rounded once at the end)."""
    return kernel_for(x.dtype)(x, panels, out_features, bias)


def amx_active() -> bool:
    """Whether bf16 calls run on AMX tiles: built where the CPU has AMX-BF16, Linux granted
    the tile state, and not switched off by `use_amx(False)`."""
    module = load()
    return module is not None and bool(module.amx_active())


def use_amx(on: bool) -> bool:
    """Switch the bf16 AMX path on or off (for A/B runs and tests of both paths); returns the
    previous setting. AMX and vdpbf16ps round the pair products differently, so the two
    paths differ in the last bits; each is batch invariant on its own."""
    module = load()
    assert module is not None
    return bool(module.use_amx(on))


def silu_pairs_available() -> bool:
    """Whether the built kernel has linear_silu_mul (AVX-512 builds)."""
    module = load()
    return module is not None and hasattr(module, "linear_silu_mul")


def paired_rows(out_features: int) -> int:
    """The rows a gate_up weight of out_features = 2I rows has in pairs: each half padded to
    whole panels, 2 * ceil(I / 16) * 16."""
    return 2 * -(-(out_features // 2) // LANES) * LANES


def pair_rows(weight: torch.Tensor, group: int = 1) -> torch.Tensor:
    """A gate_up weight [2I, K] (gate rows, then up rows) -> [paired_rows(2I), K] in groups of
    `group` 16-row blocks: gate rows [16 group t, 16 group (t + 1)), then the same up rows (the
    last group may hold fewer blocks); zero rows past I."""
    inter, k = weight.shape[0] // 2, weight.shape[1]
    padded = paired_rows(weight.shape[0]) // 2
    halves = weight.new_zeros(2, padded, k)
    halves[:, :inter] = weight.view(2, inter, k)
    return torch.cat([both.reshape(-1, k) for both in halves.split(group * LANES, dim=1)])


def pack_silu_pairs(weight: torch.Tensor) -> torch.Tensor:
    """A gate_up weight [2I, K] packed for linear_silu_mul: gate / up pairs of panel groups,
    as wide as the kernel's tiles for this dtype (fp32 3 panels, bf16 1)."""
    module = load()
    assert module is not None
    group = module.silu_group(weight.dtype == torch.bfloat16)
    return pack(pair_rows(weight.detach(), group))


def linear_silu_mul(x: torch.Tensor, panels: torch.Tensor, inter: int) -> torch.Tensor:
    """x [M, K] contiguous -> silu(x Wg^T) * (x Wu^T) [M, inter] over pack_silu_pairs panels:
    the same values as `linear` then SiLU-and-mul, without the [M, 2 * inter] in between."""
    module = load()
    assert module is not None
    return module.linear_silu_mul(x, panels, inter)


def unpack(panels: torch.Tensor, out_features: int, in_features: int) -> torch.Tensor:
    """The [N, K] weight back from its panels."""
    if panels.dim() == 4:  # bf16: [P, pairs, 16, 2] -> [P, 2 pairs, 16]
        panels = panels.transpose(2, 3).reshape(panels.shape[0], -1, LANES)
    return panels.transpose(1, 2).reshape(-1, panels.shape[1])[:out_features, :in_features]


def linear_reference(x: torch.Tensor, panels: torch.Tensor, out_features: int,
                     bias: torch.Tensor | None) -> torch.Tensor:
    """The same product in torch, from the panels (fp64 accumulation: the tests' oracle)."""
    weight = unpack(panels, out_features, x.shape[1])
    y = x.double() @ weight.double().T
    if bias is not None:
        y = y + bias.double()
    return y.to(x.dtype)
