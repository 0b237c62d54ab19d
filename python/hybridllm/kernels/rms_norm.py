"""RMSNorm, optionally fused with the residual add before it (one read of x and residual).

Rounding follows models.layers exactly: the residual sum is rounded to the activation dtype,
the normalized row is rounded before the weight multiply, statistics are fp32.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _rms_norm_kernel(
    out_ptr, x_ptr, res_ptr, w_ptr, eps, n_cols,
    stride_o, stride_x, stride_r,
    HAS_RESIDUAL: tl.constexpr, BLOCK: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0)
    if HAS_RESIDUAL:
        r = tl.load(res_ptr + row * stride_r + cols, mask=mask, other=0.0)
        x = (x.to(tl.float32) + r.to(tl.float32)).to(x.dtype)
        tl.store(res_ptr + row * stride_r + cols, x, mask=mask)
    xf = x.to(tl.float32)
    inv_rms = 1.0 / tl.sqrt_rn(tl.sum(xf * xf, 0) / n_cols + eps)
    normed = (xf * inv_rms).to(x.dtype)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0)
    out = w.to(tl.float32) * normed.to(tl.float32)
    # x and out may alias (in place): the whole row is read before this store.
    tl.store(out_ptr + row * stride_o + cols, out.to(out_ptr.dtype.element_ty), mask=mask)


def _rows(t: torch.Tensor) -> torch.Tensor:
    rows = t.view(-1, t.shape[-1])  # a view, so in-place writes land in the caller's tensor
    assert rows.stride(-1) == 1, "the normalized dimension must be contiguous"
    return rows


def _launch(
    x: torch.Tensor,
    residual: torch.Tensor | None,
    weight: torch.Tensor,
    eps: float,
    out: torch.Tensor | None,
) -> torch.Tensor:
    n = x.shape[-1]
    if out is None:
        out = torch.empty(x.shape, dtype=torch.promote_types(weight.dtype, x.dtype),
                          device=x.device)
    x2, o2 = _rows(x), _rows(out)
    r2 = _rows(residual) if residual is not None else x2
    if x2.shape[0] == 0:
        return out
    _rms_norm_kernel[(x2.shape[0],)](
        o2, x2, r2, weight, eps, n, o2.stride(0), x2.stride(0), r2.stride(0),
        HAS_RESIDUAL=residual is not None, BLOCK=triton.next_power_of_2(n),
        num_warps=min(16, max(1, triton.next_power_of_2(n) // 256)),
    )
    return out


def rms_norm(
    x: torch.Tensor, weight: torch.Tensor, eps: float, out: torch.Tensor | None = None
) -> torch.Tensor:
    """Same result as models.layers.rms_norm; out may be x itself."""
    return _launch(x, None, weight, eps, out)


def add_rms_norm(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    out: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """residual += x IN PLACE, then (rms_norm(residual), residual) as models.layers returns."""
    assert x.dtype == residual.dtype and x.shape == residual.shape
    return _launch(x, residual, weight, eps, out), residual
