"""Unified paged attention over a flat mixed batch (prompts, chunks on a cached prefix, decodes).

One program handles BLOCK_Q query tokens of one sequence times all GROUP query heads that share
one kv head, so each K/V tile is loaded once for the whole GQA group. Programs find their
sequence by binary search over cu_seqlens_q on the device, so the grid depends only on host
sizes (T, B): no device sync, and the launch can be captured in a CUDA graph.
`paged_attention` picks between this kernel and the split-KV decode kernel.

A sliding-window layer passes its window W: the query at position p sees keys p - W + 1 .. p,
and tiles wholly before a program's first row's window are not loaded at all.
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from hybridllm.kernels import LOG2E, NO_WINDOW, dot_precision, interpreting
from hybridllm.step_types import AttentionMetadata


@triton.jit
def _find_seq(cu_q_ptr, q_block, num_seqs, BLOCK_Q: tl.constexpr):
    # Sequence i's q blocks start at cu_q[i] // BLOCK_Q + i: strictly increasing in i, and
    # a sequence of n tokens fits in n // BLOCK_Q + 1 blocks. Last i whose start <= q_block.
    lo = 0
    hi = num_seqs
    while lo < hi:
        mid = (lo + hi) // 2
        start = tl.load(cu_q_ptr + mid) // BLOCK_Q + mid
        if start <= q_block:
            lo = mid + 1
        else:
            hi = mid
    return lo - 1


@triton.jit
def _unified_attention_kernel(
    out_ptr, q_ptr, k_cache_ptr, v_cache_ptr,
    block_tables_ptr, seq_lens_ptr, cu_q_ptr,
    qk_scale, num_seqs, block_size, window,
    stride_qt, stride_qh, stride_ot, stride_oh,
    stride_kb, stride_ks, stride_kh, stride_vb, stride_vs, stride_vh, stride_bt,
    GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr,
    BLOCK_Q: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    PRECISION: tl.constexpr,
):
    q_block = tl.program_id(0)
    kv_head = tl.program_id(1)
    seq = _find_seq(cu_q_ptr, q_block, num_seqs, BLOCK_Q)
    q_start = tl.load(cu_q_ptr + seq)
    q_len = tl.load(cu_q_ptr + seq + 1) - q_start
    local = q_block - (q_start // BLOCK_Q + seq)
    if local * BLOCK_Q >= q_len:
        return
    seq_len = tl.load(seq_lens_ptr + seq)
    context = seq_len - q_len  # keys cached before this step's query rows

    # Row m of the tile is query token m // GROUP, head m % GROUP of this kv head's group.
    offs_m = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM_PAD)
    offs_n = tl.arange(0, BLOCK_N)
    q_pos = local * BLOCK_Q + offs_m // GROUP
    head = kv_head * GROUP + offs_m % GROUP
    row_ok = (offs_m // GROUP < BLOCK_Q) & (q_pos < q_len)
    d_ok = offs_d < HEAD_DIM
    q_rows = (q_start + q_pos).to(tl.int64)
    q = tl.load(
        q_ptr + q_rows[:, None] * stride_qt + head[:, None] * stride_qh + offs_d[None, :],
        mask=row_ok[:, None] & d_ok[None, :], other=0.0,
    )
    last_key = context + q_pos  # causal: row sees keys last_key - window + 1 .. last_key
    num_keys = tl.minimum(seq_len, context + (local + 1) * BLOCK_Q)
    first_key = tl.maximum(context + local * BLOCK_Q - window + 1, 0)  # the tile's first row's

    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM_PAD], tl.float32)
    table = block_tables_ptr + seq.to(tl.int64) * stride_bt
    for start_n in range(first_key, num_keys, BLOCK_N):
        k_pos = start_n + offs_n
        k_ok = k_pos < num_keys
        phys = tl.load(table + k_pos // block_size, mask=k_ok, other=0).to(tl.int64)
        in_block = k_pos % block_size
        kv_mask = k_ok[:, None] & d_ok[None, :]
        k = tl.load(
            k_cache_ptr + phys[:, None] * stride_kb + in_block[:, None] * stride_ks
            + kv_head * stride_kh + offs_d[None, :],
            mask=kv_mask, other=0.0,
        )
        # Scores in log2 units (scale folded with log2 e) so the softmax can use exp2.
        s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * qk_scale
        visible = row_ok[:, None] & (k_pos[None, :] <= last_key[:, None])
        visible = visible & (k_pos[None, :] > last_key[:, None] - window)
        s = tl.where(visible, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        # Rows with nothing visible yet keep m = -inf; subtract 0 so exp2 gives 0, not NaN.
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
    out = acc / tl.where(l_i > 0.0, l_i, 1.0)[:, None]
    tl.store(
        out_ptr + q_rows[:, None] * stride_ot + head[:, None] * stride_oh + offs_d[None, :],
        out.to(out_ptr.dtype.element_ty), mask=row_ok[:, None] & d_ok[None, :],
    )


def unified_attention(
    query: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    meta: AttentionMetadata,
    scale: float,
    out: torch.Tensor | None = None,
    window: int | None = None,
) -> torch.Tensor:
    num_tokens, num_heads, head_dim = query.shape
    num_kv_heads = key_cache.shape[2]
    group = num_heads // num_kv_heads
    out = torch.empty_like(query) if out is None else out
    if num_tokens == 0:
        return out
    # Small tiles for decode-heavy batches (few rows per sequence), larger ones for prefill.
    cap = 64 if not interpreting() else 32
    block_m = max(16, min(cap, triton.next_power_of_2(max(1, meta.max_seqlen_q) * group)))
    block_m = max(block_m, triton.next_power_of_2(group))
    block_q = block_m // group
    block_n = 32 if interpreting() else 64
    num_seqs = meta.num_seqs
    grid = (num_tokens // block_q + num_seqs, num_kv_heads)
    _unified_attention_kernel[grid](
        out, query, key_cache, value_cache,
        meta.block_tables, meta.seq_lens, meta.cu_seqlens_q,
        scale * LOG2E, num_seqs, key_cache.shape[1], window or NO_WINDOW,
        query.stride(0), query.stride(1), out.stride(0), out.stride(1),
        key_cache.stride(0), key_cache.stride(1), key_cache.stride(2),
        value_cache.stride(0), value_cache.stride(1), value_cache.stride(2),
        meta.block_tables.stride(0),
        GROUP=group, HEAD_DIM=head_dim, HEAD_DIM_PAD=triton.next_power_of_2(max(16, head_dim)),
        BLOCK_Q=block_q, BLOCK_M=block_m, BLOCK_N=block_n,
        PRECISION=dot_precision(query.dtype),
    )
    return out


@functools.cache
def _num_sms(device_index: int) -> int:
    return torch.cuda.get_device_properties(device_index).multi_processor_count


MIN_KEYS_PER_SPLIT = 128
MAX_SPLITS = 64


def choose_num_splits(
    meta: AttentionMetadata, num_kv_heads: int, device: torch.device, window: int | None = None
) -> int:
    """Split the keys across programs only when a decode batch would leave most SMs idle."""
    if not meta.is_pure_decode or meta.num_seqs == 0:
        return 1
    sms = _num_sms(device.index or 0) if device.type == "cuda" else 132
    programs = meta.num_seqs * num_kv_heads
    if programs >= sms:
        return 1
    by_work = min(meta.max_seqlen_k, window or NO_WINDOW) // MIN_KEYS_PER_SPLIT
    by_occupancy = triton.cdiv(2 * sms, programs)
    return max(1, min(by_work, by_occupancy, MAX_SPLITS))


def paged_attention(
    query: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    meta: AttentionMetadata,
    scale: float,
    num_splits: int | None = None,
    out: torch.Tensor | None = None,
    window: int | None = None,
) -> torch.Tensor:
    """[T, H, D] causal GQA attention over the paged cache, over the last `window` keys of
    each query if given; plans from host lists only."""
    if num_splits is None:
        num_splits = choose_num_splits(meta, key_cache.shape[2], query.device, window)
    if num_splits > 1 and meta.is_pure_decode:
        from hybridllm.kernels.paged_decode_split import split_kv_decode

        return split_kv_decode(
            query, key_cache, value_cache, meta, scale, num_splits, out, window
        )
    return unified_attention(query, key_cache, value_cache, meta, scale, out, window)
