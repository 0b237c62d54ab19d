"""Unified and split-KV paged attention vs the torch reference (paged_attention_reference).

Tolerances: fp32 1e-5 (the kernel accumulates in fp32 with exp2 and blockwise sums; observed
error is ~5e-7 on outputs of order 1). fp16/bf16 compare with an fp32 reference computed from
the same low-precision inputs; the kernel rounds P to the input dtype for the PV product and
rounds the output, each a relative error of half an ulp (fp16 2^-11, bf16 2^-8), so 2e-3 and
1e-2 leave about 2x headroom over those two roundings.
"""

from __future__ import annotations

import pytest
import torch

from hybridllm.attention.torch_ref import paged_attention_reference
from hybridllm.kernels.paged_attention import choose_num_splits, paged_attention
from hybridllm.kernels.testing import build_metadata, random_kv_cache

requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
TOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1e-2}

# (query_len, seq_len): whole prompts, chunks on a cached prefix, decodes; lengths not
# multiples of the block size (16), a prompt spanning several q blocks.
MIXED = [(7, 7), (5, 37), (1, 50), (1, 16), (20, 20), (3, 19), (1, 1), (17, 65)]


def _check(
    specs: list[tuple[int, int]],
    num_kv_heads: int,
    group: int,
    head_dim: int,
    dtype: torch.dtype,
    device: torch.device,
    num_splits: int | None,
    block_size: int = 16,
    num_pad_tokens: int = 0,
    seed: int = 0,
    window: int | None = None,
) -> None:
    g = torch.Generator().manual_seed(seed)
    num_blocks = sum((k + block_size - 1) // block_size for _, k in specs) + 8
    meta = build_metadata(specs, block_size, num_blocks, device, g, num_pad_tokens)
    k_cache, v_cache = random_kv_cache(
        num_blocks, block_size, num_kv_heads, head_dim, dtype, device, g
    )
    num_tokens = meta.slot_mapping.shape[0]
    query = torch.randn(num_tokens, num_kv_heads * group, head_dim, generator=g).to(dtype)
    query = query.to(device)
    scale = head_dim**-0.5
    out = paged_attention(
        query, k_cache, v_cache, meta, scale, num_splits=num_splits, window=window
    )
    ref = paged_attention_reference(
        query.float(), k_cache.float(), v_cache.float(), meta, scale, window
    )
    rows = sum(q for q, _ in specs)  # padded rows belong to no sequence: undefined output
    tol = TOL[dtype]
    torch.testing.assert_close(out[:rows].float(), ref[:rows], atol=tol, rtol=tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("group", [1, 3])
def test_unified_mixed_batch(dtype: torch.dtype, group: int, device: torch.device) -> None:
    _check(MIXED, 2, group, 32, dtype, device, num_splits=1, num_pad_tokens=3)


def test_unified_head_dim_not_power_of_two(device: torch.device) -> None:
    _check([(4, 9), (1, 33)], 1, 4, 24, torch.float32, device, num_splits=1, block_size=8)


@pytest.mark.parametrize("num_splits", [2, 3, 8])
@pytest.mark.parametrize("group", [1, 3])
def test_split_kv_decode(num_splits: int, group: int, device: torch.device) -> None:
    # seq_len 3 with 8 splits leaves empty partitions, which the reduce must weigh zero.
    specs = [(1, 100), (1, 3), (1, 47), (1, 16)]
    _check(specs, 2, group, 32, torch.float32, device, num_splits=num_splits)


def test_split_kv_decode_fp16(device: torch.device) -> None:
    _check([(1, 70), (1, 33)], 2, 3, 32, torch.float16, device, num_splits=4)


# Windows shorter than most sequences, one not a multiple of BLOCK_N (so a program's first
# tile starts mid-window), and one of a single key.
@pytest.mark.parametrize("window", [1, 6, 16, 40])
@pytest.mark.parametrize("group", [1, 3])
def test_unified_sliding_window(window: int, group: int, device: torch.device) -> None:
    _check(MIXED, 2, group, 32, torch.float32, device, num_splits=1, num_pad_tokens=3,
           window=window)


@pytest.mark.parametrize("num_splits", [2, 3])
@pytest.mark.parametrize("window", [1, 6, 40])
def test_split_kv_decode_sliding_window(num_splits: int, window: int, device: torch.device) -> None:
    specs = [(1, 100), (1, 3), (1, 47), (1, 16)]
    _check(specs, 2, 3, 32, torch.float32, device, num_splits=num_splits, window=window)


@pytest.mark.parametrize("window", [None, 1, 6, 16, 40])
def test_reference_window_is_dense_masked_softmax(window: int | None) -> None:
    """The torch reference (the kernels' oracle), all its paths (whole prompts with their own
    keys, chunks, gathered decodes), against softmax over a dense mask written out here."""
    g = torch.Generator().manual_seed(1)
    specs, kv_heads, group, dim, bs = MIXED, 2, 3, 32, 16
    num_blocks = sum((k + bs - 1) // bs for _, k in specs) + 8
    meta = build_metadata(specs, bs, num_blocks, "cpu", g)
    k_cache, v_cache = random_kv_cache(num_blocks, bs, kv_heads, dim, torch.float32, "cpu", g)
    query = torch.randn(meta.slot_mapping.shape[0], kv_heads * group, dim, generator=g)
    scale = dim**-0.5
    # The whole-prompt path reads this step's keys from the call's key / value.
    keys = k_cache.reshape(-1, kv_heads, dim)[meta.slot_mapping]
    values = v_cache.reshape(-1, kv_heads, dim)[meta.slot_mapping]
    from hybridllm.attention.torch_ref import TorchAttentionBackend

    got = TorchAttentionBackend(use_kernel=False).forward(
        query, k_cache, v_cache, meta, scale, key=keys, value=values, window=window
    )
    row = 0
    for i, (q_len, k_len) in enumerate(specs):
        blocks = meta.block_tables[i, : (k_len + bs - 1) // bs].long()
        k = k_cache[blocks].reshape(-1, kv_heads, dim)[:k_len].repeat_interleave(group, 1)
        v = v_cache[blocks].reshape(-1, kv_heads, dim)[:k_len].repeat_interleave(group, 1)
        for r in range(q_len):
            pos = k_len - q_len + r
            seen = [c for c in range(k_len) if c <= pos and (window is None or c > pos - window)]
            s = torch.einsum("hd,khd->hk", query[row + r], k[seen]) * scale
            expect = torch.einsum("hk,khd->hd", s.softmax(-1), v[seen])
            torch.testing.assert_close(got[row + r], expect, atol=1e-5, rtol=1e-5)
        row += q_len


def test_choose_num_splits_from_host_lists() -> None:
    cpu = torch.device("cpu")
    long_decode = build_metadata([(1, 4000)], 16, 300, cpu)
    assert choose_num_splits(long_decode, 8, cpu) > 1
    short_decode = build_metadata([(1, 100)], 16, 300, cpu)
    assert choose_num_splits(short_decode, 8, cpu) == 1
    prefill = build_metadata([(2, 4000)], 16, 300, cpu)
    assert choose_num_splits(prefill, 8, cpu) == 1
    many = build_metadata([(1, 200)] * 40, 16, 600, cpu)
    assert choose_num_splits(many, 8, cpu) == 1


@requires_cuda
@pytest.mark.parametrize("num_splits", [None, 1])
def test_cuda_bf16_mixed_real_shapes(num_splits: int | None, device: torch.device) -> None:
    specs = [(300, 300), (128, 4000), (1, 4096), (1, 1000), (1, 17), (64, 2111), (1, 3000)]
    _check(specs, 8, 4, 128, torch.bfloat16, device, num_splits=num_splits, num_pad_tokens=5)


@requires_cuda
@pytest.mark.parametrize("num_splits", [None, 1, 16])
def test_cuda_bf16_decode_real_shapes(num_splits: int | None, device: torch.device) -> None:
    specs = [(1, 4096), (1, 2500), (1, 333)]
    _check(specs, 8, 4, 128, torch.bfloat16, device, num_splits=num_splits)
