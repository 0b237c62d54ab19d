"""The C++ panel linear kernel against its torch reference, and its batch invariance."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest
import torch

from hybridllm.kernels import linear_cpu
from hybridllm.models.cpu_linear import (
    ALL_ROWS,
    DECODER_PANEL_ROWS,
    PANEL_ROWS,
    PackedLinear,
)


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


def test_pack_layout_bf16() -> None:
    """bf16: panel p, pair i, lane j, element e holds W[16 p + j, 2 i + e]; columns past N
    and the k past an odd K are zero; unpack gives the weight back."""
    weight = torch.arange(35 * 3, dtype=torch.bfloat16).view(35, 3)
    panels = linear_cpu.pack(weight)
    assert panels.shape == (3, 2, 16, 2) and panels.dtype == torch.bfloat16
    assert panels[1, 0, 5, 1].item() == weight[21, 1].item()
    assert panels[2, 1, 2, 0].item() == weight[34, 2].item()
    assert torch.count_nonzero(panels[:, 1, :, 1]).item() == 0
    assert torch.count_nonzero(panels[2, :, 3:]).item() == 0
    assert torch.equal(linear_cpu.unpack(panels, 35, 3), weight)


# N: whole groups of panels (3 a tile in fp32 on AVX-512, 2 in bf16), a last group of fewer
# (64: one panel past whole fp32 groups; 72: two, the second ragged), a ragged last panel,
# fewer than one panel.
# M: every tile height on AVX-512 (up to 8 rows against 3 or 2 panels, 9-16 rows against one)
# and AVX2 (6), and several tiles.
@pytest.mark.parametrize("n, k", [(64, 32), (72, 48), (48, 96), (35, 3), (7, 576), (960, 576)])
@pytest.mark.parametrize("m", [1, 2, 3, 5, 6, 7, 8, 9, 13, 16, 17])
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


# K odd: the zero k that completes the last pair must add nothing.
@pytest.mark.parametrize("n, k", [(64, 32), (72, 48), (48, 96), (35, 3), (7, 577), (960, 576)])
@pytest.mark.parametrize("m", [1, 2, 5, 6, 7, 8, 9, 16, 17])
@pytest.mark.parametrize("with_bias", [False, True])
def test_bf16_matches_reference(n: int, k: int, m: int, with_bias: bool) -> None:
    gen = torch.Generator().manual_seed(n * 1000 + k * 10 + m)
    weight = torch.randn(n, k, generator=gen).bfloat16()
    bias = torch.randn(n, generator=gen).bfloat16() if with_bias else None
    x = torch.randn(m, k, generator=gen).bfloat16()
    panels = linear_cpu.pack(weight)
    out = linear_cpu.linear(x, panels, n, bias)
    assert out.shape == (m, n) and out.dtype == torch.bfloat16
    exact = x.double() @ weight.double().T + (0 if bias is None else bias.double())
    # The reference (fp64 sums from the panels, rounded once) is the exact product rounded.
    ref = linear_cpu.linear_reference(x, panels, n, bias)
    assert torch.equal(ref, exact.to(torch.bfloat16))
    # fp32 sums of exact bf16 products (at most two roundings per k pair) then one rounding
    # to bf16 (half an ulp: 2^-8 relative).
    magnitude = x.abs().double() @ weight.abs().double().T
    if bias is not None:
        magnitude += bias.abs().double()
    bound = 2.0**-8 * exact.abs() + (k + 2) * 2.0**-24 * magnitude * (1 + 2.0**-8)
    assert bool(((out.double() - exact).abs() <= bound).all())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rows_do_not_depend_on_the_batch(dtype: torch.dtype) -> None:
    """Row i's output is the same bits alone, in any tile height, and at any place in it."""
    gen = torch.Generator().manual_seed(1)
    weight = torch.randn(200, 576, generator=gen).to(dtype)
    panels = linear_cpu.pack(weight)
    x = torch.randn(17, 576, generator=gen).to(dtype)
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


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_decoder_linear_takes_every_call_through_the_panels(dtype: torch.dtype) -> None:
    """A decoder's PackedLinear keeps no oneDNN copy, in either dtype: every row count (a
    decode batch, a prefill chunk past PANEL_ROWS) gets the panel kernel's bits."""
    gen = torch.Generator().manual_seed(3)
    weight = torch.randn(96, 64, generator=gen).to(dtype)
    bias = torch.randn(96, generator=gen).to(dtype)
    assert DECODER_PANEL_ROWS == ALL_ROWS
    layer = PackedLinear(weight, bias, DECODER_PANEL_ROWS)
    assert layer.packed is None and layer.panels is not None
    for rows in (1, PANEL_ROWS, 300):
        x = torch.randn(rows, 64, generator=gen).to(dtype)
        out = layer(x)
        assert out.dtype == dtype and out.shape == (rows, 96)
        assert torch.equal(out, linear_cpu.linear(x, layer.panels, 96, bias))


# The kernel as other CPUs build it: without AVX512_BF16 (bf16 pairs widened to fp32 and
# added by FMAs) and without AVX-512 at all (AVX2 tiles of 6 rows, one panel).
@pytest.mark.parametrize("isa", ["-mno-avx512bf16", "-mno-avx512f"])
def test_other_isas_match_the_reference(isa: str) -> None:
    from hybridllm.kernels.cpu_build import OPENMP, build

    module = build(f"hybridllm_linear_cpu{isa.replace('-', '_')}", "linear_cpu.cpp",
                   ["-O3", "-march=native", isa, *OPENMP])
    assert module is not None
    gen = torch.Generator().manual_seed(4)
    for dtype in (torch.float32, torch.bfloat16):
        n, k = 83, 577
        weight = torch.randn(n, k, generator=gen).to(dtype)
        bias = torch.randn(n, generator=gen).to(dtype)
        panels = linear_cpu.pack(weight)
        x = torch.randn(13, k, generator=gen).to(dtype)
        fn = module.linear_bf16 if dtype == torch.bfloat16 else module.linear
        out = fn(x, panels, n, bias)
        exact = x.double() @ weight.double().T + bias.double()
        magnitude = x.abs().double() @ weight.abs().double().T + bias.abs().double()
        rounding = 2.0**-8 * exact.abs() if dtype == torch.bfloat16 else 0
        bound = rounding + (k + 2) * 2.0**-24 * magnitude * (1 + 2.0**-8)
        assert out.dtype == dtype and out.shape == (13, n)
        assert bool(((out.double() - exact).abs() <= bound).all()), dtype
        # Batch invariance holds on every path.
        assert torch.equal(fn(x[5:6].contiguous(), panels, n, bias)[0], out[5])


# ---- A SiLU MLP's gate_up with SiLU-and-mul in the epilogue (AVX-512 builds) ----
needs_silu_pairs = pytest.mark.skipif(
    not linear_cpu.silu_pairs_available(), reason="linear_silu_mul needs an AVX-512 build"
)


@pytest.mark.parametrize(
    "group,inter,segments",
    [
        # bf16's pairs: 2 blocks a half, the second ragged (rows 16-19)
        (1, 20, [("gate", 0, 16), ("up", 0, 16), ("gate", 16, 20), ("zero", 12), ("up", 16, 20),
                 ("zero", 12)]),
        # fp32's groups of 3: 5 blocks a half, a group of 3 then one of 2 (rows 48-71)
        (3, 72, [("gate", 0, 48), ("up", 0, 48), ("gate", 48, 72), ("zero", 8), ("up", 48, 72),
                 ("zero", 8)]),
    ],
)
def test_pair_rows_layout(group: int, inter: int, segments: list[tuple]) -> None:
    """[2I, K] -> groups of `group` 16-row blocks: gate rows, then the same up rows; zeros
    past I."""
    k = 3
    weight = torch.arange(2 * inter * k, dtype=torch.float32).view(2 * inter, k)
    parts = {"gate": lambda a, b: weight[a:b], "up": lambda a, b: weight[inter + a : inter + b],
             "zero": lambda n: torch.zeros(n, k)}
    expected = torch.cat([parts[kind](*span) for kind, *span in segments])
    assert torch.equal(linear_cpu.pair_rows(weight, group), expected)
    if group == 1:
        assert torch.equal(linear_cpu.pair_rows(weight), expected)  # the default


@needs_silu_pairs
@pytest.mark.parametrize("inter,k", [(96, 64), (72, 40), (40, 33), (16, 7)])
@pytest.mark.parametrize("rows", [1, 7, 8, 9, 16, 17, 64, 130])
def test_silu_mul_epilogue(inter: int, k: int, rows: int) -> None:
    """linear_silu_mul against linear then silu_and_mul, every tile shape (1-8 rows, the
    9-16-row one-panel tile, 8-row tiles with a tail) and fp32 group (6 blocks a half: two
    groups of 3; 5: 3 then 2, ragged; 3; 1): bf16 bitwise; fp32 within 4 ulps (the separate op
    is compiled with fast-math) and against an fp64 reference."""
    from hybridllm.kernels import layer_ops_cpu

    gen = torch.Generator().manual_seed(rows * 1000 + inter + k)
    weight = torch.randn(2 * inter, k, generator=gen)
    x = torch.randn(rows, k, generator=gen)
    for dtype in (torch.float32, torch.bfloat16):
        w, xd = weight.to(dtype), x.to(dtype)
        fused = linear_cpu.linear_silu_mul(xd, linear_cpu.pack_silu_pairs(w), inter)
        assert fused.shape == (rows, inter) and fused.dtype == dtype
        unfused = layer_ops_cpu.silu_and_mul(
            linear_cpu.linear(xd, linear_cpu.pack(w), 2 * inter, None)
        )
        if dtype == torch.bfloat16:
            assert torch.equal(fused, unfused)
            continue
        torch.testing.assert_close(fused, unfused, rtol=4 * 2.0**-23, atol=1e-30)
        gate_up = x.double() @ weight.double().T
        ref = torch.nn.functional.silu(gate_up[:, :inter]) * gate_up[:, inter:]
        torch.testing.assert_close(fused.double(), ref, rtol=1e-5, atol=1e-4)


@needs_silu_pairs
def test_silu_mul_batch_invariant() -> None:
    """A row's result is the same bits whatever else is in the call."""
    gen = torch.Generator().manual_seed(1)
    weight = torch.randn(2 * 48, 40, generator=gen)
    x = torch.randn(70, 40, generator=gen)
    panels = linear_cpu.pack_silu_pairs(weight)
    full = linear_cpu.linear_silu_mul(x, panels, 48)
    for rows in (1, 5, 12, 33):
        assert torch.equal(linear_cpu.linear_silu_mul(x[:rows].contiguous(), panels, 48),
                           full[:rows])


@needs_silu_pairs
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_pack_linears_fuses_a_silu_gate_up(dtype: torch.dtype) -> None:
    """pack_linears packs the child a module names as its SiLU gate_up with the epilogue, and
    LlamaMLP then gives what the plain panels and the separate op give (bf16 bitwise)."""
    from types import SimpleNamespace

    from hybridllm.models.cpu_linear import PackedSiluMulLinear, pack_linears
    from hybridllm.models.fused_ops import cpu_ops
    from hybridllm.models.llama import LlamaMLP

    cfg = SimpleNamespace(hidden_size=64, intermediate_size=80)
    torch.manual_seed(0)
    fused = LlamaMLP(cfg).to(dtype)  # type: ignore[arg-type]
    plain = LlamaMLP(cfg).to(dtype)  # type: ignore[arg-type]
    plain.load_state_dict(fused.state_dict())
    plain.silu_gate_up = None  # the same module, packed without the epilogue
    assert pack_linears(fused, DECODER_PANEL_ROWS) == 2
    assert pack_linears(plain, DECODER_PANEL_ROWS) == 2
    assert isinstance(fused.gate_up_proj, PackedSiluMulLinear)
    assert type(plain.gate_up_proj) is PackedLinear
    ops = cpu_ops()
    assert ops is not None
    x = torch.randn(2, 9, 64).to(dtype)
    with torch.inference_mode():
        assert fused.gate_up_proj.forward(x).shape == (2, 9, 80)
        out, ref = fused.forward(x.view(18, 64), ops), plain.forward(x.view(18, 64), ops)
    assert out.shape == (18, 64)
    if dtype == torch.bfloat16:
        assert torch.equal(out, ref)
    else:
        torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-6)


# ---- bf16 on AMX tiles (CPUs with AMX-BF16) and on vdpbf16ps, side by side ----
NO_AMX = "the CPU has no AMX-BF16 (or Linux refused the tile state)"


@contextlib.contextmanager
def amx_off() -> Iterator[None]:
    was = linear_cpu.use_amx(False)
    try:
        yield
    finally:
        linear_cpu.use_amx(was)


@pytest.fixture(params=["amx", "vdpbf16ps"])
def bf16_path(request: pytest.FixtureRequest) -> Iterator[str]:
    """Runs the test on one bf16 path: AMX tiles, or the vector kernel with AMX off."""
    if request.param == "amx":
        if not linear_cpu.amx_active():
            pytest.skip(NO_AMX)
        yield request.param
        return
    with amx_off():
        yield request.param


# K a multiple of 32 (AMX's 16 k pairs a tile) and not (the vector kernel takes it); N whole
# and ragged 4-panel groups; M one row, a tile's 16, a tail past it, several tiles.
@pytest.mark.parametrize("n, k", [(64, 32), (100, 64), (33, 96), (960, 576), (40, 40)])
@pytest.mark.parametrize("m", [1, 3, 16, 17, 64, 100])
def test_bf16_paths_match_the_exact_product(bf16_path: str, n: int, k: int, m: int) -> None:
    gen = torch.Generator().manual_seed(n * 1000 + k * 10 + m)
    weight = torch.randn(n, k, generator=gen).bfloat16()
    bias = torch.randn(n, generator=gen)
    x = torch.randn(m, k, generator=gen).bfloat16()
    out = linear_cpu.linear(x, linear_cpu.pack(weight), n, bias)
    assert out.shape == (m, n) and out.dtype == torch.bfloat16
    exact = x.double() @ weight.double().T + bias.double()
    magnitude = x.abs().double() @ weight.abs().double().T + bias.abs().double()
    bound = 2.0**-8 * exact.abs() + (k + 2) * 2.0**-24 * magnitude * (1 + 2.0**-8)
    assert bool(((out.double() - exact).abs() <= bound).all())


def test_bf16_paths_are_batch_invariant(bf16_path: str) -> None:
    """On either path a row's output is the same bits alone, in a full 16-row tile, in the
    tail tile and at any offset; the fused SiLU gate_up too."""
    gen = torch.Generator().manual_seed(2)
    weight = torch.randn(200, 576, generator=gen).bfloat16()
    panels = linear_cpu.pack(weight)
    x = torch.randn(37, 576, generator=gen).bfloat16()
    whole = linear_cpu.linear(x, panels, 200, None)
    for i in (0, 15, 16, 36):
        assert torch.equal(linear_cpu.linear(x[i : i + 1].contiguous(), panels, 200, None)[0],
                           whole[i]), i
    assert torch.equal(linear_cpu.linear(x[5:].contiguous(), panels, 200, None), whole[5:])
    if linear_cpu.silu_pairs_available():
        pairs = linear_cpu.pack_silu_pairs(torch.randn(2 * 72, 576, generator=gen).bfloat16())
        fused = linear_cpu.linear_silu_mul(x, pairs, 72)
        assert torch.equal(linear_cpu.linear_silu_mul(x[20:21].contiguous(), pairs, 72)[0],
                           fused[20])


@needs_silu_pairs
@pytest.mark.parametrize("rows", [1, 16, 17, 64])
def test_bf16_paths_silu_epilogue_is_linear_then_silu(bf16_path: str, rows: int) -> None:
    """The fused gate_up on either path is bitwise the same path's linear then silu_and_mul
    (I = 72: a last 4-panel block holding one gate / up pair)."""
    from hybridllm.kernels import layer_ops_cpu

    gen = torch.Generator().manual_seed(rows)
    weight = torch.randn(2 * 72, 576, generator=gen).bfloat16()
    x = torch.randn(rows, 576, generator=gen).bfloat16()
    fused = linear_cpu.linear_silu_mul(x, linear_cpu.pack_silu_pairs(weight), 72)
    unfused = layer_ops_cpu.silu_and_mul(linear_cpu.linear(x, linear_cpu.pack(weight), 144, None))
    assert torch.equal(fused, unfused)


def test_amx_and_vector_paths_agree_to_an_ulp() -> None:
    """Where both run, they differ only in how a k pair's products are rounded: every
    output within one bf16 ulp of the other."""
    if not linear_cpu.amx_active():
        pytest.skip(NO_AMX)
    gen = torch.Generator().manual_seed(3)
    weight = torch.randn(576, 1536, generator=gen).bfloat16()
    x = torch.randn(64, 1536, generator=gen).bfloat16()
    panels = linear_cpu.pack(weight)
    amx = linear_cpu.linear(x, panels, 576, None)
    with amx_off():
        vector = linear_cpu.linear(x, panels, 576, None)
    ulp = 2.0 ** (torch.floor(torch.log2(vector.float().abs().clamp_min(1e-30))) - 7)
    assert bool(((amx.float() - vector.float()).abs() <= ulp).all())
