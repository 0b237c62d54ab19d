"""reshape_and_cache vs write_kv_reference: a pure copy, so results must match exactly."""

from __future__ import annotations

import pytest
import torch

from hybridllm.attention.torch_ref import write_kv_reference
from hybridllm.kernels.reshape_and_cache import reshape_and_cache
from hybridllm.kernels.testing import build_metadata, random_kv_cache

requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def _check(
    num_kv_heads: int, head_dim: int, dtype: torch.dtype, device: torch.device, scale: int
) -> None:
    g = torch.Generator().manual_seed(1)
    specs = [(7 * scale, 7 * scale), (5, 37 * scale), (1, 50), (3, 19)]
    block_size, num_blocks = 16, 64 * scale
    meta = build_metadata(specs, block_size, num_blocks, device, g, num_pad_tokens=3)
    k_cache, v_cache = random_kv_cache(
        num_blocks, block_size, num_kv_heads, head_dim, dtype, device, g
    )
    num_tokens = meta.slot_mapping.shape[0]
    # K/V as strided views of one fused projection output, as the model hands them over.
    qkv = torch.randn(num_tokens, 3 * num_kv_heads * head_dim, generator=g).to(dtype).to(device)
    _, key, value = qkv.split(num_kv_heads * head_dim, dim=-1)
    key = key.view(num_tokens, num_kv_heads, head_dim)
    value = value.view(num_tokens, num_kv_heads, head_dim)
    k_ref, v_ref = k_cache.clone(), v_cache.clone()
    write_kv_reference(key, value, k_ref, v_ref, meta.slot_mapping)
    reshape_and_cache(key, value, k_cache, v_cache, meta.slot_mapping)
    assert torch.equal(k_cache, k_ref)
    assert torch.equal(v_cache, v_ref)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("num_kv_heads", [1, 3])
def test_reshape_and_cache(dtype: torch.dtype, num_kv_heads: int, device: torch.device) -> None:
    _check(num_kv_heads, 24, dtype, device, scale=1)


@requires_cuda
def test_reshape_and_cache_cuda_bf16(device: torch.device) -> None:
    _check(8, 128, torch.bfloat16, device, scale=20)
