"""Fused SiLU-and-mul: [..., 2I] (gate | up) -> silu(gate) * up, one read and one write.

Rounds the SiLU result to the activation dtype before the multiply, as the torch reference
(F.silu(gate) * up) does.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _silu_and_mul_kernel(
    out_ptr, x_ptr, n_cols, stride_o, stride_x, BLOCK: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < n_cols
    gate = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0)
    up = tl.load(x_ptr + row * stride_x + n_cols + cols, mask=mask, other=0.0)
    g = gate.to(tl.float32)
    silu = (g / (1.0 + tl.exp(-g))).to(gate.dtype)
    out = silu.to(tl.float32) * up.to(tl.float32)
    tl.store(out_ptr + row * stride_o + cols, out.to(out_ptr.dtype.element_ty), mask=mask)


def silu_and_mul(gate_up: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """Same result as models.layers.silu_and_mul."""
    n = gate_up.shape[-1] // 2
    x2 = gate_up.reshape(-1, 2 * n)
    assert x2.stride(-1) == 1
    if out is None:
        out = torch.empty(*gate_up.shape[:-1], n, dtype=gate_up.dtype, device=gate_up.device)
    o2 = out.view(-1, n)
    if x2.shape[0] == 0:
        return out
    block = min(1024, triton.next_power_of_2(n))
    _silu_and_mul_kernel[(x2.shape[0], triton.cdiv(n, block))](
        o2, x2, n, o2.stride(0), x2.stride(0), BLOCK=block
    )
    return out
