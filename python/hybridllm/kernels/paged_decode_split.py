"""Split-KV decode attention (flash-decoding) for few sequences with long contexts.

With one query token per sequence, B * num_kv_heads programs can leave most SMs idle; here
each sequence's keys are cut into num_splits partitions handled by separate programs, which
write unnormalized partial outputs plus their running max and sum; a second kernel merges
them. The partition length is derived from the device seq_lens, so only num_splits is planned
on the host (a captured graph stays correct as contexts grow). A sliding-window layer's
partitions cover only its last `window` keys.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from hybridllm.kernels import LOG2E, NO_WINDOW, dot_precision, interpreting
from hybridllm.step_types import AttentionMetadata


@triton.jit
def _split_decode_kernel(
    part_out_ptr, part_ml_ptr, q_ptr, k_cache_ptr, v_cache_ptr,
    block_tables_ptr, seq_lens_ptr, cu_q_ptr,
    qk_scale, block_size, num_heads, window,
    stride_qt, stride_qh,
    stride_kb, stride_ks, stride_kh, stride_vb, stride_vs, stride_vh, stride_bt,
    GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr,
    BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr, NUM_SPLITS: tl.constexpr,
    PRECISION: tl.constexpr,
):
    seq = tl.program_id(0)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)
    token = tl.load(cu_q_ptr + seq)
    if tl.load(cu_q_ptr + seq + 1) - token != 1:
        return
    seq_len = tl.load(seq_lens_ptr + seq)
    first = tl.maximum(seq_len - window, 0)
    part = tl.cdiv(tl.cdiv(seq_len - first, NUM_SPLITS), BLOCK_N) * BLOCK_N
    start = first + split * part
    end = tl.minimum(start + part, seq_len)

    offs_h = tl.arange(0, BLOCK_H)
    offs_d = tl.arange(0, HEAD_DIM_PAD)
    offs_n = tl.arange(0, BLOCK_N)
    head = kv_head * GROUP + offs_h
    h_ok = offs_h < GROUP
    d_ok = offs_d < HEAD_DIM
    q = tl.load(
        q_ptr + token.to(tl.int64) * stride_qt + head[:, None] * stride_qh + offs_d[None, :],
        mask=h_ok[:, None] & d_ok[None, :], other=0.0,
    )
    m_i = tl.full([BLOCK_H], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_H], tl.float32)
    acc = tl.zeros([BLOCK_H, HEAD_DIM_PAD], tl.float32)
    table = block_tables_ptr + seq.to(tl.int64) * stride_bt
    for start_n in range(start, end, BLOCK_N):
        k_pos = start_n + offs_n
        k_ok = k_pos < end
        phys = tl.load(table + k_pos // block_size, mask=k_ok, other=0).to(tl.int64)
        in_block = k_pos % block_size
        kv_mask = k_ok[:, None] & d_ok[None, :]
        k = tl.load(
            k_cache_ptr + phys[:, None] * stride_kb + in_block[:, None] * stride_ks
            + kv_head * stride_kh + offs_d[None, :],
            mask=kv_mask, other=0.0,
        )
        s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * qk_scale
        s = tl.where(h_ok[:, None] & k_ok[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_safe = tl.where(m_new > float("-inf"), m_new, 0.0)
        p = tl.math.exp2(s - m_safe[:, None])
        alpha = tl.math.exp2(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(
            v_cache_ptr + phys[:, None] * stride_vb + in_block[:, None] * stride_vs
            + kv_head * stride_vh + offs_d[None, :],
            mask=kv_mask, other=0.0,
        )
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
        m_i = m_new
    # Partials laid out [B, H, NUM_SPLITS, D] and [B, H, NUM_SPLITS, 2] (max, sum), fp32.
    row = (seq * num_heads + head).to(tl.int64) * NUM_SPLITS + split
    tl.store(
        part_out_ptr + row[:, None] * HEAD_DIM + offs_d[None, :], acc,
        mask=h_ok[:, None] & d_ok[None, :],
    )
    tl.store(part_ml_ptr + row * 2, m_i, mask=h_ok)
    tl.store(part_ml_ptr + row * 2 + 1, l_i, mask=h_ok)


@triton.jit
def _split_reduce_kernel(
    out_ptr, part_out_ptr, part_ml_ptr, cu_q_ptr, num_heads,
    stride_ot, stride_oh,
    HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr,
    NUM_SPLITS: tl.constexpr, SPLITS_PAD: tl.constexpr,
):
    seq = tl.program_id(0)
    head = tl.program_id(1)
    token = tl.load(cu_q_ptr + seq)
    if tl.load(cu_q_ptr + seq + 1) - token != 1:
        return
    offs_s = tl.arange(0, SPLITS_PAD)
    offs_d = tl.arange(0, HEAD_DIM_PAD)
    s_ok = offs_s < NUM_SPLITS
    d_ok = offs_d < HEAD_DIM
    row = (seq * num_heads + head).to(tl.int64) * NUM_SPLITS + offs_s
    m = tl.load(part_ml_ptr + row * 2, mask=s_ok, other=float("-inf"))
    l_part = tl.load(part_ml_ptr + row * 2 + 1, mask=s_ok, other=0.0)
    acc = tl.load(
        part_out_ptr + row[:, None] * HEAD_DIM + offs_d[None, :],
        mask=s_ok[:, None] & d_ok[None, :], other=0.0,
    )
    m_all = tl.max(m, 0)
    m_all = tl.where(m_all > float("-inf"), m_all, 0.0)
    w = tl.math.exp2(m - m_all)  # empty partitions have m = -inf: weight 0
    total = tl.sum(w * l_part, 0)
    out = tl.sum(acc * w[:, None], 0) / tl.where(total > 0.0, total, 1.0)
    tl.store(
        out_ptr + token.to(tl.int64) * stride_ot + head * stride_oh + offs_d,
        out.to(out_ptr.dtype.element_ty), mask=d_ok,
    )


def split_kv_decode(
    query: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    meta: AttentionMetadata,
    scale: float,
    num_splits: int,
    out: torch.Tensor | None = None,
    window: int | None = None,
) -> torch.Tensor:
    num_tokens, num_heads, head_dim = query.shape
    num_kv_heads = key_cache.shape[2]
    group = num_heads // num_kv_heads
    num_seqs = meta.num_seqs
    out = torch.empty_like(query) if out is None else out
    if num_tokens == 0:
        return out
    part_out = torch.empty(
        num_seqs, num_heads, num_splits, head_dim, dtype=torch.float32, device=query.device
    )
    part_ml = torch.empty(
        num_seqs, num_heads, num_splits, 2, dtype=torch.float32, device=query.device
    )
    head_dim_pad = triton.next_power_of_2(max(16, head_dim))
    _split_decode_kernel[(num_seqs, num_kv_heads, num_splits)](
        part_out, part_ml, query, key_cache, value_cache,
        meta.block_tables, meta.seq_lens, meta.cu_seqlens_q,
        scale * LOG2E, key_cache.shape[1], num_heads, window or NO_WINDOW,
        query.stride(0), query.stride(1),
        key_cache.stride(0), key_cache.stride(1), key_cache.stride(2),
        value_cache.stride(0), value_cache.stride(1), value_cache.stride(2),
        meta.block_tables.stride(0),
        GROUP=group, HEAD_DIM=head_dim, HEAD_DIM_PAD=head_dim_pad,
        BLOCK_H=max(16, triton.next_power_of_2(group)),
        BLOCK_N=32 if interpreting() else 64, NUM_SPLITS=num_splits,
        PRECISION=dot_precision(query.dtype),
    )
    _split_reduce_kernel[(num_seqs, num_heads)](
        out, part_out, part_ml, meta.cu_seqlens_q, num_heads,
        out.stride(0), out.stride(1),
        HEAD_DIM=head_dim, HEAD_DIM_PAD=head_dim_pad,
        NUM_SPLITS=num_splits, SPLITS_PAD=triton.next_power_of_2(num_splits),
    )
    return out
