"""Triton in-place rotary vs models.layers.apply_rotary: identical fp32 math (up to fused
multiply-add, ~1 ulp fp32), so fp32 at 1e-6 and one fp16/bf16 ulp (2^-10, 2^-7)."""

from __future__ import annotations

import pytest
import torch

from hybridllm.kernels.rotary import apply_rotary, rotary_embedding_
from hybridllm.models import layers

requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
RTOL = {torch.float32: 1e-6, torch.float16: 1e-3, torch.bfloat16: 8e-3}


def _check(
    tokens: int, heads: int, kv_heads: int, head_dim: int, dtype: torch.dtype,
    device: torch.device,
) -> None:
    g = torch.Generator().manual_seed(5)
    cos_sin = layers.rope_cos_sin(head_dim, 4096, 500000.0, None).to(device)
    positions = torch.randint(0, 4096, (tokens,), generator=g).to(device)
    q_size, kv_size = heads * head_dim, kv_heads * head_dim
    qkv = torch.randn(tokens, q_size + 2 * kv_size, generator=g).to(dtype).to(device)
    q, k, v = qkv.split([q_size, kv_size, kv_size], dim=-1)  # strided views, as in the model
    q = q.view(tokens, heads, head_dim)
    k = k.view(tokens, kv_heads, head_dim)
    ref_q = layers.apply_rotary(q, positions, cos_sin)
    ref_k = layers.apply_rotary(k, positions, cos_sin)
    v_before = v.clone()
    rotary_embedding_(q, k, positions, cos_sin)
    tol = {"atol": 1e-6, "rtol": RTOL[dtype]}
    torch.testing.assert_close(q, ref_q, **tol)
    torch.testing.assert_close(k, ref_k, **tol)
    assert torch.equal(v, v_before), "rotary must not touch neighbouring columns"
    x = torch.randn(tokens, kv_heads, head_dim, generator=g).to(dtype).to(device)
    x_before = x.clone()
    torch.testing.assert_close(
        apply_rotary(x, positions, cos_sin), layers.apply_rotary(x, positions, cos_sin), **tol
    )
    assert torch.equal(x, x_before), "apply_rotary without inplace leaves x alone"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("kv_heads", [1, 3])
def test_rotary(dtype: torch.dtype, kv_heads: int, device: torch.device) -> None:
    _check(6, 3 * kv_heads, kv_heads, 24, dtype, device)


@requires_cuda
def test_rotary_cuda_bf16(device: torch.device) -> None:
    _check(300, 32, 8, 128, torch.bfloat16, device)
