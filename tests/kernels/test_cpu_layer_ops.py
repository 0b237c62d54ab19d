"""The C++ CPU layer ops (kernels/layer_ops_cpu.py) against the torch functions of
models/layers.py, op by op and through a whole tiny model step.

fp32: a different fp32 summation order (RMSNorm's sum of squares) and exp, so a few ulps.
bf16: both compute in fp32 and round at the same points, so results differ by at most one
bf16 ulp, where those few fp32 ulps straddle a rounding boundary."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from hybridllm.attention.torch_ref import TorchAttentionBackend
from hybridllm.kernels import layer_ops_cpu
from hybridllm.kernels.testing import TINY_LLAMA_CONFIG, build_metadata
from hybridllm.models import layers
from hybridllm.models.fused_ops import cpu_ops
from hybridllm.models.loader import load_model
from hybridllm.models.registry import generation_config

DTYPES = [torch.float32, torch.bfloat16]


def close(out: torch.Tensor, ref: torch.Tensor) -> None:
    assert out.dtype == ref.dtype and out.shape == ref.shape
    if out.dtype == torch.float32:
        torch.testing.assert_close(out, ref, rtol=4e-6, atol=1e-6)
    else:
        torch.testing.assert_close(out.float(), ref.float(), rtol=2**-7, atol=1e-6)


def test_ops_build() -> None:
    """The set-up installs what the build needs (g++ from the OS, ninja from PyPI)."""
    assert layer_ops_cpu.load() is not None
    assert cpu_ops() is not None


# 576: whole vectors; 100 and 17: a short tail; 8: a tail only.
@pytest.mark.parametrize("width", [576, 100, 17, 8])
@pytest.mark.parametrize("dtype", DTYPES)
def test_rms_norm(width: int, dtype: torch.dtype) -> None:
    g = torch.Generator().manual_seed(width)
    wide = (torch.randn(37, width + 5, generator=g) * 3).to(dtype)
    x = wide[:, :width]  # rows with a stride: Qwen3's per-head norms get views
    w = torch.randn(width, generator=g).to(dtype)
    close(layer_ops_cpu.rms_norm(x, w, 1e-6), layers.rms_norm(x, w, 1e-6))
    # A 3-D input keeps its shape.
    x3 = x.contiguous().view(37, 1, width)
    close(layer_ops_cpu.rms_norm(x3, w, 1e-6), layers.rms_norm(x3, w, 1e-6))


@pytest.mark.parametrize("width", [576, 100])
@pytest.mark.parametrize("dtype", DTYPES)
def test_add_rms_norm_updates_the_residual(width: int, dtype: torch.dtype) -> None:
    g = torch.Generator().manual_seed(1)
    x, r = (torch.randn(2, 33, width, generator=g) * 2).to(dtype).unbind(0)
    w = torch.randn(width, generator=g).to(dtype)
    ref_out, ref_residual = layers.add_rms_norm(x, r, w, 1e-5)
    residual = r.clone()
    out, returned = layer_ops_cpu.add_rms_norm(x, residual, w, 1e-5)
    assert returned is residual
    close(residual, ref_residual)
    close(out, ref_out)


@pytest.mark.parametrize("inter", [1536, 40, 9])
@pytest.mark.parametrize("dtype", DTYPES)
def test_silu_and_mul(inter: int, dtype: torch.dtype) -> None:
    g = torch.Generator().manual_seed(2)
    # Wide range: the sigmoid's exp saturates both ways (and is clamped) in here.
    gate_up = (torch.randn(21, 2 * inter, generator=g) * 30).to(dtype)
    before = gate_up.clone()
    out = layer_ops_cpu.silu_and_mul(gate_up)
    assert out.is_contiguous() and out.shape == (21, inter)
    close(out, layers.silu_and_mul(gate_up))
    assert torch.equal(gate_up, before)


@pytest.mark.parametrize("heads, kv_heads, dim", [(9, 3, 64), (4, 1, 256), (6, 2, 24)])
@pytest.mark.parametrize("dtype", DTYPES)
def test_rotary_in_place_on_qkv_views(heads: int, kv_heads: int, dim: int,
                                      dtype: torch.dtype) -> None:
    g = torch.Generator().manual_seed(3)
    tokens = 29
    qkv = torch.randn(tokens, (heads + 2 * kv_heads) * dim, generator=g).to(dtype)
    q = qkv[:, : heads * dim].view(tokens, heads, dim)
    k = qkv[:, heads * dim : (heads + kv_heads) * dim].view(tokens, kv_heads, dim)
    cos_sin = layers.rope_cos_sin(dim, 5000, 10000.0, None)
    positions = torch.randint(0, 5000, (tokens,), generator=g)
    ref_q, ref_k = layers.rotary_qk(q, k, positions, cos_sin)
    v_before = qkv[:, (heads + kv_heads) * dim :].clone()
    out_q, out_k = layer_ops_cpu.rotary_qk(q, k, positions, cos_sin)
    assert out_q is q and out_k is k
    close(q, ref_q)
    close(k, ref_k)
    assert torch.equal(qkv[:, (heads + kv_heads) * dim :], v_before)


def test_bad_inputs_are_refused() -> None:
    x = torch.randn(4, 8)
    with pytest.raises(RuntimeError, match="weight must be"):
        layer_ops_cpu.rms_norm(x, torch.randn(7), 1e-6)
    with pytest.raises(RuntimeError, match="float32 or bfloat16"):
        layer_ops_cpu.rms_norm(x.double(), torch.randn(8).double(), 1e-6)
    q, k = torch.randn(3, 2, 8), torch.randn(3, 1, 8)
    cos_sin = layers.rope_cos_sin(8, 10, 10000.0, None)
    with pytest.raises(RuntimeError, match="outside the table"):
        layer_ops_cpu.rotary_qk(q, k, torch.tensor([0, 10, 1]), cos_sin)


TINY = TINY_LLAMA_CONFIG


VARIANTS = {
    "llama": {},
    "qwen3": {"architectures": ["Qwen3ForCausalLM"], "head_dim": 32},
    "mistral-window": {"architectures": ["MistralForCausalLM"], "sliding_window": 7},
}
# Cached keys agree to 1e-6 where they are small (Llama's, ~0.1 with dummy weights). Qwen3
# normalizes each key head to gain 1, ~10x larger: layer 0's few-ulp differences (each op
# alone moves layer 1's keys by 0.5-2e-6) reach them as ~2e-6.
CACHE_ATOL = {"qwen3": 1e-5}


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_tiny_model_step(variant: str, tmp_path: Path) -> None:
    """A mixed batch (whole prompts, a chunk, decodes) through C++ ops and attention kernels
    against torch ops and torch attention, fp32."""
    (tmp_path / "config.json").write_text(json.dumps(TINY | VARIANTS[variant]))
    cfg = generation_config(tmp_path)
    model = load_model(tmp_path, cfg, torch.float32, torch.device("cpu"), 128,
                       load_format="dummy")
    g = torch.Generator().manual_seed(11)
    meta = build_metadata([(6, 6), (3, 21), (1, 9), (1, 33), (18, 18)], 16, 12, "cpu", g)
    positions = torch.cat([
        torch.arange(k - q, k) for q, k in zip(meta.query_lens_host, meta.seq_lens_host)
    ])
    input_ids = torch.randint(0, cfg.vocab_size, (positions.shape[0],), generator=g)
    caches = torch.randn(cfg.num_hidden_layers, 2, 12, 16, cfg.num_key_value_heads,
                         cfg.head_dim, generator=g)
    ref_caches = list(caches.clone().unbind(0))
    with torch.inference_mode():
        ref = model.forward(input_ids, positions, ref_caches, meta,
                            TorchAttentionBackend(use_kernel=False))
        ops = cpu_ops()
        assert ops is not None
        model.set_layer_ops(ops)
        out_caches = list(caches.clone().unbind(0))
        out = model.forward(input_ids, positions, out_caches, meta, TorchAttentionBackend())
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    for a, b in zip(out_caches, ref_caches):
        torch.testing.assert_close(a, b, atol=CACHE_ATOL.get(variant, 1e-6), rtol=1e-6)
