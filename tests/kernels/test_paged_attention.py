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
    out = paged_attention(query, k_cache, v_cache, meta, scale, num_splits=num_splits)
    ref = paged_attention_reference(query.float(), k_cache.float(), v_cache.float(), meta, scale)
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
