"""Reference attention in plain torch: the CPU path, and the oracle for the Triton kernels."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from hybridllm.attention.metadata import AttentionMetadata


def write_kv_reference(
    key: torch.Tensor,
    value: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> None:
    keep = slot_mapping >= 0
    if not bool(keep.all()):
        key, value, slot_mapping = key[keep], value[keep], slot_mapping[keep]
    num_kv_heads, head_dim = key_cache.shape[2], key_cache.shape[3]
    key_cache.view(-1, num_kv_heads, head_dim).index_copy_(0, slot_mapping, key)
    value_cache.view(-1, num_kv_heads, head_dim).index_copy_(0, slot_mapping, value)


def gather_kv(
    cache: torch.Tensor, block_tables: torch.Tensor, num_keys: int
) -> torch.Tensor:
    """[B, max_blocks] block tables -> [B, num_keys, num_kv_heads, head_dim] contiguous keys."""
    block_size = cache.shape[1]
    num_blocks = (num_keys + block_size - 1) // block_size
    gathered = cache[block_tables[:, :num_blocks].long()]  # [B, nb, bs, H, D]
    b, nb, bs, h, d = gathered.shape
    return gathered.reshape(b, nb * bs, h, d)[:, :num_keys]


def paged_attention_reference(
    query: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    meta: AttentionMetadata,
    scale: float,
) -> torch.Tensor:
    """Causal attention of each sequence's query rows over its cached keys (GQA by grouping)."""
    out = torch.empty_like(query)
    decode_rows, prefill = [], []
    start = 0
    for i, (q_len, k_len) in enumerate(zip(meta.query_lens_host, meta.seq_lens_host)):
        if q_len == 1:
            decode_rows.append((i, start, k_len))
        elif q_len > 0:
            prefill.append((i, start, q_len, k_len))
        start += q_len
    if decode_rows:
        _decode_batched(query, key_cache, value_cache, meta, scale, decode_rows, out)
    for i, start, q_len, k_len in prefill:
        q = query[start : start + q_len].transpose(0, 1)  # [H, q, D]
        k = gather_kv(key_cache, meta.block_tables[i : i + 1], k_len)[0].transpose(0, 1)
        v = gather_kv(value_cache, meta.block_tables[i : i + 1], k_len)[0].transpose(0, 1)
        # Query row j sits at key position k_len - q_len + j and sees keys up to it.
        mask = torch.ones(q_len, k_len, dtype=torch.bool, device=q.device).tril(k_len - q_len)
        o = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, scale=scale, enable_gqa=True
        )
        out[start : start + q_len] = o.transpose(0, 1)
    return out


def _decode_batched(
    query: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    meta: AttentionMetadata,
    scale: float,
    rows: list[tuple[int, int, int]],
    out: torch.Tensor,
) -> None:
    """All single-token queries at once, keys padded to the longest and masked."""
    seq_idx = torch.tensor([r[0] for r in rows], device=query.device)
    q_idx = torch.tensor([r[1] for r in rows], device=query.device)
    lens = torch.tensor([r[2] for r in rows], device=query.device)
    max_len = max(r[2] for r in rows)
    tables = meta.block_tables.index_select(0, seq_idx)
    k = gather_kv(key_cache, tables, max_len).transpose(1, 2)  # [b, Hkv, L, D]
    v = gather_kv(value_cache, tables, max_len).transpose(1, 2)
    q = query.index_select(0, q_idx).unsqueeze(2)  # [b, H, 1, D]
    mask = torch.arange(max_len, device=query.device)[None, :] < lens[:, None]
    o = F.scaled_dot_product_attention(
        q, k, v, attn_mask=mask[:, None, None, :], scale=scale, enable_gqa=True
    )
    out.index_copy_(0, q_idx, o.squeeze(2))


class TorchAttentionBackend:
    name = "torch"

    def write_kv(
        self,
        key: torch.Tensor,
        value: torch.Tensor,
        key_cache: torch.Tensor,
        value_cache: torch.Tensor,
        slot_mapping: torch.Tensor,
    ) -> None:
        write_kv_reference(key, value, key_cache, value_cache, slot_mapping)

    def forward(
        self,
        query: torch.Tensor,
        key_cache: torch.Tensor,
        value_cache: torch.Tensor,
        meta: AttentionMetadata,
        scale: float,
    ) -> torch.Tensor:
        return paged_attention_reference(query, key_cache, value_cache, meta, scale)
