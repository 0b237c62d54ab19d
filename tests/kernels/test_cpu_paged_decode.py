"""The C++ CPU paged attention kernels, decode and prefill, against the torch reference
(gather + softmax)."""

from __future__ import annotations

import pytest
import torch

from hybridllm.attention.torch_ref import paged_attention_reference
from hybridllm.kernels import cpu_paged_decode
from hybridllm.kernels.testing import build_metadata, random_kv_cache
from hybridllm.step_types import AttentionMetadata


def test_kernel_builds() -> None:
    """The set-up installs what the build needs (g++ from the OS, ninja from PyPI)."""
    assert cpu_paged_decode.load() is not None


# The vectorized path (head_dim 32 / 64 / 128 / 256 with 1, 2, 3, 4 or 8 query heads per kv head),
# in bf16 on an AVX512_BF16 CPU the dot-product path (head_dim 32 / 64 with up to 4 query heads
# per kv head, 128 with up to 2), and the generic one (any other head_dim or grouping).
@pytest.mark.parametrize(
    "heads, kv_heads, dim",
    [(9, 3, 64), (4, 4, 32), (8, 4, 64), (4, 2, 128), (8, 2, 128), (8, 1, 128), (4, 1, 256),
     (6, 2, 24), (5, 1, 32)],
)
@pytest.mark.parametrize("window", [None, 1, 5, 16, 17, 33])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("block_size", [8, 16, 32])
def test_matches_reference(
    heads: int, kv_heads: int, dim: int, window: int | None, dtype: torch.dtype,
    block_size: int,
) -> None:
    """window: a sliding-window layer's last-W keys, starting mid-block or on a boundary,
    shorter and longer than the sequences. A bf16 cache is computed in fp32: the reference
    runs in fp32 on the same bf16 values. Blocks of 8, 16 and 32 keys (scores are summed 16
    keys at a time, never across a block)."""
    gen = torch.Generator().manual_seed(0)
    batch, num_blocks = 7, 7 * 14
    lens = torch.tensor([1, 5, 16, 17, 40, 63, 100], dtype=torch.int32)
    key_cache = torch.randn(num_blocks, block_size, kv_heads, dim, generator=gen)
    value_cache = torch.randn(num_blocks, block_size, kv_heads, dim, generator=gen)
    # Shuffled physical blocks, so the block table really is followed.
    per_seq = num_blocks // batch
    tables = torch.randperm(num_blocks, generator=gen).view(batch, per_seq).int()
    query = torch.randn(batch, heads, dim, generator=gen)
    meta = AttentionMetadata(
        slot_mapping=torch.full((batch,), -1, dtype=torch.long),
        cu_seqlens_q=torch.arange(batch + 1, dtype=torch.int32),
        seq_lens=lens, block_tables=tables, max_seqlen_q=1, max_seqlen_k=int(lens.max()),
        query_lens_host=[1] * batch, seq_lens_host=lens.tolist(),
    )
    key_cache, value_cache, query = (t.to(dtype) for t in (key_cache, value_cache, query))
    scale = dim**-0.5
    ref = paged_attention_reference(
        query.float(), key_cache.float(), value_cache.float(), meta, scale, window
    )
    out = cpu_paged_decode.paged_decode(query, key_cache, value_cache, tables, lens, scale, window)
    assert out.dtype == dtype and out.shape == query.shape
    if dtype == torch.float32:
        # fp32 with a different summation order: a few ulps of outputs of order 1.
        torch.testing.assert_close(out, ref, rtol=0, atol=2e-6)
    else:
        # The same fp32 result rounded once to bf16: the fp32 bound above plus at most one
        # bf16 ulp, where the summation order's few fp32 ulps straddle a rounding boundary.
        torch.testing.assert_close(out.float(), ref.to(dtype).float(), rtol=2**-7, atol=2e-6)


# Whole prompts (shorter than, as long as, and longer than a 16-row tile, some ending mid
# block), chunks of a longer prompt (rows after cached keys), and decode rows the kernel must
# leave alone.
PREFILL_SPECS = [(128, 128), (5, 20), (17, 17), (33, 100), (1, 9), (16, 16), (40, 41), (1, 60)]


@pytest.mark.parametrize("heads, kv_heads, dim", [(9, 3, 64), (8, 8, 32), (4, 1, 256), (6, 2, 24)])
@pytest.mark.parametrize("window", [None, 1, 5, 16, 40])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_prefill_matches_reference(
    heads: int, kv_heads: int, dim: int, window: int | None, dtype: torch.dtype
) -> None:
    gen = torch.Generator().manual_seed(1)
    block_size, num_blocks = 16, 48
    meta = build_metadata(PREFILL_SPECS, block_size, num_blocks, "cpu", gen)
    key_cache, value_cache = random_kv_cache(num_blocks, block_size, kv_heads, dim, dtype, "cpu",
                                             gen)
    tokens = sum(q for q, _ in PREFILL_SPECS)
    # The query as the model has it: a view of a wider fused-projection row.
    qkv = torch.randn(tokens, (heads + 2 * kv_heads) * dim, generator=gen).to(dtype)
    query = qkv[:, : heads * dim].view(tokens, heads, dim)
    scale = dim**-0.5
    ref = paged_attention_reference(
        query.float(), key_cache.float(), value_cache.float(), meta, scale, window
    )
    seqs, start, prompt_rows = [], 0, torch.zeros(tokens, dtype=torch.bool)
    for i, (q_len, k_len) in enumerate(PREFILL_SPECS):
        if q_len > 1:
            seqs.append([i, start, q_len, k_len])
            prompt_rows[start : start + q_len] = True
        start += q_len
    out = torch.full((tokens, heads, dim), 7.0, dtype=dtype)
    cpu_paged_decode.paged_prefill(
        query, key_cache, value_cache, meta.block_tables, torch.tensor(seqs), scale, window, out
    )
    assert torch.equal(out[~prompt_rows], torch.full_like(out[~prompt_rows], 7.0))
    got, want = out[prompt_rows], ref[prompt_rows]
    # The decode bound, plus the online softmax's rescaling of each row's running sums once
    # per 16-key chunk (up to 8 times here), one fp32 rounding each: ~20 ulps of outputs of
    # order 1 at head_dim 256 (both sides' 256-term score sums round differently).
    if dtype == torch.float32:
        torch.testing.assert_close(got, want, rtol=4e-6, atol=2e-6)
    else:
        torch.testing.assert_close(got.float(), want.to(dtype).float(), rtol=2**-7, atol=2e-6)


def test_prefill_refuses_rows_out_of_range() -> None:
    meta = build_metadata([(4, 4)], 16, 2, "cpu")
    key_cache, value_cache = random_kv_cache(2, 16, 1, 32, torch.float32, "cpu")
    query = torch.randn(4, 1, 32)
    out = torch.empty_like(query)
    for bad in ([0, 0, 5, 5], [0, 1, 4, 4], [0, 0, 4, 3], [1, 0, 4, 4], [0, 0, 4, 40]):
        with pytest.raises(RuntimeError, match="out of range"):
            cpu_paged_decode.paged_prefill(query, key_cache, value_cache, meta.block_tables,
                                           torch.tensor([bad]), 0.1, None, out)


def test_decode_reads_a_strided_query() -> None:
    """q as the model passes it, a view of the fused qkv rows: the same bits as a copy."""
    gen = torch.Generator().manual_seed(5)
    meta = build_metadata([(1, 30), (1, 70), (1, 5)], 16, 32, "cpu", gen)
    for dtype in (torch.float32, torch.bfloat16):
        key_cache, value_cache = random_kv_cache(32, 16, 3, 64, dtype, "cpu", gen)
        qkv = torch.randn(3, 9 * 64 + 2 * 3 * 64, generator=gen).to(dtype)
        query = qkv[:, : 9 * 64].view(3, 9, 64)
        assert not query.is_contiguous()
        args = (key_cache, value_cache, meta.block_tables, meta.seq_lens, 0.125)
        strided = cpu_paged_decode.paged_decode(query, *args)
        assert torch.equal(strided, cpu_paged_decode.paged_decode(query.contiguous(), *args))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_write_kv_matches_index_copy(dtype: torch.dtype) -> None:
    """Rows land at their slots (k and v as views of the fused qkv rows), a negative slot
    (a padded row) writes nothing, and every other slot keeps its bits."""
    gen = torch.Generator().manual_seed(6)
    key_cache, value_cache = random_kv_cache(8, 16, 3, 64, dtype, "cpu", gen)
    want_k, want_v = key_cache.clone(), value_cache.clone()
    qkv = torch.randn(300, 960, generator=gen).to(dtype)  # 300 rows: more than one thread's
    key, value = qkv[:, 576:768].view(300, 3, 64), qkv[:, 768:].view(300, 3, 64)
    slots = torch.randperm(8 * 16, generator=gen)[:100].repeat(3)[:300]
    slots[100:] = -1
    slots[:5] = -1
    cpu_paged_decode.write_kv(key, value, key_cache, value_cache, slots)
    keep = slots >= 0
    want_k.view(-1, 3, 64).index_copy_(0, slots[keep], key[keep])
    want_v.view(-1, 3, 64).index_copy_(0, slots[keep], value[keep])
    assert torch.equal(key_cache, want_k) and torch.equal(value_cache, want_v)


def test_write_kv_refuses_bad_input() -> None:
    key_cache, value_cache = random_kv_cache(2, 16, 1, 32, torch.float32, "cpu")
    key = torch.randn(2, 1, 32)
    slots = torch.tensor([0, 32])
    with pytest.raises(RuntimeError, match="slot 32 past the cache's 32"):
        cpu_paged_decode.write_kv(key, key, key_cache, value_cache, slots)
    with pytest.raises(RuntimeError, match="one dtype"):
        cpu_paged_decode.write_kv(key.bfloat16(), key.bfloat16(), key_cache, value_cache,
                                  torch.tensor([0, 1]))
    with pytest.raises(RuntimeError, match="int64 slots, one per row"):
        cpu_paged_decode.write_kv(key, key, key_cache, value_cache, torch.tensor([0, 1]).int())
