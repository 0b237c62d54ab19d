"""Rotate-half rotary embedding applied in place to q and k in one launch.

One program per token loads its cos/sin row once and rotates every q and k head; math in fp32
as in models.layers.apply_rotary. q/k may be strided views (e.g. slices of a fused qkv output).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _rotate_heads(ptr, stride_h, num_heads, cos, sin, HALF: tl.constexpr,
                  BLOCK_H: tl.constexpr, BLOCK_HALF: tl.constexpr):
    offs_h = tl.arange(0, BLOCK_H)
    offs_d = tl.arange(0, BLOCK_HALF)
    mask = (offs_h[:, None] < num_heads) & (offs_d[None, :] < HALF)
    p1 = ptr + offs_h[:, None] * stride_h + offs_d[None, :]
    x1 = tl.load(p1, mask=mask, other=0.0)
    x2 = tl.load(p1 + HALF, mask=mask, other=0.0)
    a = x1.to(tl.float32)
    b = x2.to(tl.float32)
    tl.store(p1, (a * cos[None, :] - b * sin[None, :]).to(x1.dtype), mask=mask)
    tl.store(p1 + HALF, (b * cos[None, :] + a * sin[None, :]).to(x2.dtype), mask=mask)


@triton.jit
def _rotary_kernel(
    q_ptr, k_ptr, pos_ptr, cos_sin_ptr,
    num_q_heads, num_k_heads, stride_qt, stride_qh, stride_kt, stride_kh, stride_cs,
    HAS_K: tl.constexpr, HALF: tl.constexpr, BLOCK_HALF: tl.constexpr,
    BLOCK_QH: tl.constexpr, BLOCK_KH: tl.constexpr,
):
    token = tl.program_id(0).to(tl.int64)
    pos = tl.load(pos_ptr + token).to(tl.int64)
    offs_d = tl.arange(0, BLOCK_HALF)
    d_ok = offs_d < HALF
    cos = tl.load(cos_sin_ptr + pos * stride_cs + offs_d, mask=d_ok, other=0.0).to(tl.float32)
    sin = tl.load(cos_sin_ptr + pos * stride_cs + HALF + offs_d, mask=d_ok, other=0.0)
    sin = sin.to(tl.float32)
    _rotate_heads(q_ptr + token * stride_qt, stride_qh, num_q_heads, cos, sin,
                  HALF, BLOCK_QH, BLOCK_HALF)
    if HAS_K:
        _rotate_heads(k_ptr + token * stride_kt, stride_kh, num_k_heads, cos, sin,
                      HALF, BLOCK_KH, BLOCK_HALF)


def rotary_embedding_(
    q: torch.Tensor, k: torch.Tensor | None, positions: torch.Tensor, cos_sin: torch.Tensor
) -> None:
    """In place. q: [T, H, D], k: [T, Hkv, D] or None; cos_sin: [max_pos, D] = cos | sin."""
    num_tokens, num_heads, head_dim = q.shape
    assert head_dim % 2 == 0 and q.stride(2) == 1 and cos_sin.stride(1) == 1
    assert cos_sin.shape[1] == head_dim
    k_arg = q if k is None else k
    assert k_arg.stride(2) == 1
    if num_tokens == 0:
        return
    half = head_dim // 2
    _rotary_kernel[(num_tokens,)](
        q, k_arg, positions, cos_sin,
        num_heads, k_arg.shape[1], q.stride(0), q.stride(1),
        k_arg.stride(0), k_arg.stride(1), cos_sin.stride(0),
        HAS_K=k is not None, HALF=half, BLOCK_HALF=triton.next_power_of_2(half),
        BLOCK_QH=triton.next_power_of_2(num_heads),
        BLOCK_KH=triton.next_power_of_2(k_arg.shape[1]),
    )


def apply_rotary(
    x: torch.Tensor, positions: torch.Tensor, cos_sin: torch.Tensor, inplace: bool = False
) -> torch.Tensor:
    """models.layers.apply_rotary's signature; inplace=True rotates x itself and returns it."""
    if not inplace:
        x = x.clone()
    rotary_embedding_(x, None, positions, cos_sin)
    return x
