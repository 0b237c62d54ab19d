"""Linear layers through oneDNN with weights packed once, for the fp32 and bf16 CPU paths.

torch's nn.Linear on CPU calls MKL's sgemm, which reads the row-major weight as it is on
every call. oneDNN (bundled with torch) can keep a weight in its own blocked layout instead;
with that, the GEMMs of this engine's shapes (a few to a few thousand rows against weights of
hundreds of kilobytes to 100 MB) ran 1.15x (2,048 rows) to 2x (64 rows, the LM head) faster
on a Zen 4 CPU. Same fp32 arithmetic, another summation order: outputs differ from MKL's by
a few ulps.

oneDNN's algorithms for a few rows (decode steps; 1 + k rows per sequence when speculating)
cost up to 2x what one row costs. A decoder's linears therefore keep the weight in the column
panels of `kernels/linear_cpu` instead: the weight streamed once, and a row's result the same
bits whatever the batch holds. In bf16 the panels hold k pairs that AVX512_BF16's
dot-product instruction takes whole, summed in fp32.

Where the CPU has AMX-BF16 the kernel runs bf16 calls on AMX tiles over the same panels: on
a 2-core Xeon the model's linears then took 0.20x the vector kernel's time at 64 rows and
0.42-0.93x oneDNN's (also on AMX there) from 1 to 384 rows.

On the 2-core Zen 4 of docs/benchmarks.md the panels now measure at least as fast as oneDNN
at every row count in both dtypes (fp32, all 121 linears of the default model: 0.79x
oneDNN's time at 96 and 128 rows, 0.98-1.01x from 256 to 1,024; bf16: faster from 1 to
2,048), so a decoder keeps the panels only (`DECODER_PANEL_ROWS`). `panel_rows` still
splits the calls by size (panels up to N rows, oneDNN above) for a CPU where oneDNN's large
GEMMs win.
"""

from __future__ import annotations

import torch
from torch import nn

from hybridllm.kernels import linear_cpu
from hybridllm.kernels.cpu_memory import HugePageArena

# A split point for PackedLinear(panel_rows=...): calls of at most this many rows through the
# panel kernel, larger ones through oneDNN (the panels took 0.66x oneDNN's time at 1 row,
# 0.54x at 5, 0.57x at 16, 0.80x at 64 on the 2-core Zen 4; docs/benchmarks.md).
PANEL_ROWS = 64
# panel_rows for "every call through the panels" (no oneDNN copy of the weight).
ALL_ROWS = -1
# A decoder's panel_rows, in both dtypes. bf16: 28 to 400 GFLOPS against oneDNN's 18 to 370
# from 1 to 2,048 rows. fp32: a 128-token prefill step 0.77x the time it took with oneDNN
# above 64 rows (docs/benchmarks.md), and no second copy of the weights (+540 MB for the
# default model).
DECODER_PANEL_ROWS = ALL_ROWS


def available(dtype: torch.dtype) -> bool:
    if not (torch.backends.mkldnn.is_available()
            and hasattr(torch.ops.mkldnn, "_linear_pointwise")):
        return False
    if dtype == torch.bfloat16:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    return dtype == torch.float32


class PackedLinear(nn.Module):
    """y = x W^T (+ b) with W held in oneDNN's layout. Inference only (no autograd)."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None,
                 panel_rows: int = 0, arena: HugePageArena | None = None) -> None:
        super().__init__()
        self.in_features, self.out_features = weight.shape[1], weight.shape[0]
        self.bias = None if bias is None else bias.detach().clone()
        # The panel copy for calls of up to panel_rows rows (0: none; ALL_ROWS: every call;
        # see the module's doc).
        self.panel_rows = panel_rows if panel_rows and linear_cpu.load() is not None else 0
        self.panels = linear_cpu.pack(weight) if self.panel_rows else None
        if self.panels is not None:
            # Streamed from memory on every decode step: in huge pages (kernels/cpu_memory).
            self.panels = (arena or HugePageArena(_panel_bytes(weight))).copy_of(self.panels)
        # An opaque oneDNN tensor: a plain attribute, not a parameter or buffer, so module
        # utilities (state_dict, .to) never see it. None where the panels take every call.
        self.packed = None if self.panel_rows == ALL_ROWS else weight.detach().to_mkldnn()
        # The panel kernel itself, called without the wrapper (see forward).
        self._panel_kernel = (
            linear_cpu.kernel_for(weight.dtype) if self.panels is not None else None
        )

    def _rows(self, x: torch.Tensor) -> torch.Tensor:  # 2-D, contiguous
        x2 = x.reshape(-1, self.in_features)
        return x2 if x2.is_contiguous() else x2.contiguous()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # The decoder's calls (2-D contiguous rows, panels taking them) straight to the kernel:
        # a decode step makes 121 of them, and the general path below cost ~3 us a call.
        if (
            self._panel_kernel is not None
            and x.dim() == 2
            and x.is_contiguous()
            and (self.packed is None or x.shape[0] <= self.panel_rows)
        ):
            return self._panel_kernel(x, self.panels, self.out_features, self.bias)
        rows = self._rows(x)
        if self.panels is not None and (
            self.packed is None or rows.shape[0] <= self.panel_rows
        ):
            y = linear_cpu.linear(rows, self.panels, self.out_features, self.bias)
        else:
            y = torch.ops.mkldnn._linear_pointwise(rows, self.packed, self.bias, "none", [], "")
        return y.view(*x.shape[:-1], self.out_features)

    def forward_act(self, x: torch.Tensor, act: str, algorithm: str = "") -> torch.Tensor:
        """act(x W^T + b) with the activation applied in the GEMM's epilogue (oneDNN post-op:
        "relu", or "gelu" with algorithm "none" (erf) or "tanh"); one pass over the output
        instead of two, same values."""
        assert self.packed is not None, "forward_act needs the oneDNN weight (panel_rows 0)"
        y = torch.ops.mkldnn._linear_pointwise(self._rows(x), self.packed, self.bias, act, [],
                                               algorithm)
        return y.view(*x.shape[:-1], self.out_features)

    def forward_add(self, x: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
        """x W^T + b + other, the addition fused into the GEMM (a residual connection)."""
        assert self.packed is not None, "forward_add needs the oneDNN weight (panel_rows 0)"
        y = torch.ops.mkldnn._linear_pointwise.binary(
            self._rows(x), other.reshape(-1, self.out_features), self.packed, self.bias, "add"
        )
        return y.view(*x.shape[:-1], self.out_features)


class PackedSiluMulLinear(nn.Module):
    """A SiLU MLP's gate_up projection (weight [2I, K]: the gate's rows, then the up rows; no
    bias) with SiLU-and-mul in the panel kernel's epilogue: forward(x) = silu(x Wg^T) *
    (x Wu^T), [.., I]. The [M, 2I] gate_up never reaches memory: the separate SiLU-and-mul pass
    cost ~4x its in-cache time in the model (its input had just been written, half of it by
    the other core). Same values as PackedLinear then LayerOps.silu_and_mul: bitwise in bf16,
    within a few fp32 ulps in fp32 (the separate op is built with fast-math)."""

    def __init__(self, weight: torch.Tensor, arena: HugePageArena | None = None) -> None:
        super().__init__()
        self.in_features, self.inter = weight.shape[1], weight.shape[0] // 2
        panels = linear_cpu.pack_silu_pairs(weight)
        self.panels = (arena or HugePageArena(_pair_panel_bytes(weight))).copy_of(panels)
        module = linear_cpu.load()
        assert module is not None
        self._kernel = module.linear_silu_mul

    @staticmethod
    def wanted(parent: nn.Module, name: str, child: nn.Linear, panel_rows: int) -> bool:
        """Whether pack_linears packs this child so: the parent names it as its SiLU gate_up
        (`silu_gate_up`), every call goes through the panels, and the kernel has the
        epilogue (AVX-512) for the weight's dtype."""
        return (
            getattr(parent, "silu_gate_up", None) == name
            and panel_rows == ALL_ROWS
            and child.bias is None
            and child.weight.dtype in (torch.float32, torch.bfloat16)
            and linear_cpu.silu_pairs_available()
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x2 = x.reshape(-1, self.in_features)
        y = self._kernel(x2 if x2.is_contiguous() else x2.contiguous(), self.panels, self.inter)
        return y if x.dim() == 2 else y.view(*x.shape[:-1], self.inter)


def _panel_bytes(weight: torch.Tensor) -> int:
    shape = linear_cpu.packed_shape(weight.shape[0], weight.shape[1], weight.dtype)
    return HugePageArena.bytes_for(shape, weight.dtype)


def _pair_panel_bytes(weight: torch.Tensor) -> int:
    """A gate_up weight's panels in pairs: each half padded to whole panels."""
    rows = linear_cpu.paired_rows(weight.shape[0])
    shape = linear_cpu.packed_shape(rows, weight.shape[1], weight.dtype)
    return HugePageArena.bytes_for(shape, weight.dtype)


def pack_linears(model: nn.Module, panel_rows: int = 0) -> int:
    """Replace every nn.Linear under model by a PackedLinear, or by a PackedSiluMulLinear
    where its parent names it as its SiLU gate_up (PackedSiluMulLinear.wanted); returns how
    many. Their panels share one huge-page mapping (one weight packed at a time, so load needs
    no second copy of them all)."""
    targets = [
        (parent, name, child, PackedSiluMulLinear.wanted(parent, name, child, panel_rows))
        for parent in model.modules()
        for name, child in parent.named_children()
        if isinstance(child, nn.Linear)
    ]
    arena = None
    if panel_rows and linear_cpu.load() is not None:
        arena = HugePageArena(sum(
            (_pair_panel_bytes if pairs else _panel_bytes)(child.weight)
            for _, _, child, pairs in targets
        ))
    for parent, name, child, pairs in targets:
        packed = (
            PackedSiluMulLinear(child.weight, arena) if pairs
            else PackedLinear(child.weight, child.bias, panel_rows, arena)
        )
        setattr(parent, name, packed)
    return len(targets)
