"""End to end: a tiny dummy Llama step over a mixed batch with the fused Triton layer ops
(the model's explicit switch) and the Triton attention backend, vs torch layers + torch
backend. fp32, so 1e-5 relative to the output scale (the per-kernel differences are ~1e-7).
The same for Qwen2 (q/k/v biases) and Qwen3 (per-head q/k norms through the fused RMSNorm,
head_dim 32 where hidden / heads is 16), Mistral with a window of 7 keys (shorter than
the chunks' and decodes' contexts), and Gemma 3 (a window-7 local layer, a global one)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from hybridllm.attention.torch_ref import TorchAttentionBackend
from hybridllm.attention.triton_backend import TritonAttentionBackend
from hybridllm.kernels.testing import TINY_LLAMA_CONFIG, build_metadata
from hybridllm.models import layers
from hybridllm.models.fused_ops import select_layer_ops, triton_ops
from hybridllm.models.loader import load_model
from hybridllm.models.registry import generation_config

TINY = TINY_LLAMA_CONFIG
VARIANTS = {
    "llama": {},
    "qwen2": {"architectures": ["Qwen2ForCausalLM"]},
    "qwen3": {"architectures": ["Qwen3ForCausalLM"], "head_dim": 32},
    "mistral-window": {"architectures": ["MistralForCausalLM"], "sliding_window": 7},
    "gemma3": {
        "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text",
        "sliding_window": 7, "layer_types": ["sliding_attention", "full_attention"],
        "query_pre_attn_scalar": 24, "final_logit_softcapping": 30.0,
    },
}
# Cached keys / values agree to 1e-6 where they are small (Llama's, ~0.1 with dummy weights);
# Gemma's keys leave a q/k norm with gain 2 (dummy norm weights 1, gain 1 + w): ~20x larger,
# so the same relative error of layer 0's output reaches layer 1's keys as ~2.5e-6.
CACHE_ATOL = {"gemma3": 1e-5}


def test_layer_ops_selection() -> None:
    # The CPU path takes the C++ ops unless attention itself runs in Triton.
    assert select_layer_ops(torch.device("cpu"), "torch").name == "cpu"
    assert select_layer_ops(torch.device("cpu"), "triton").name == "triton"


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_tiny_llama_step(variant: str, tmp_path: Path, device: torch.device) -> None:
    (tmp_path / "config.json").write_text(json.dumps(TINY | VARIANTS[variant]))
    cfg = generation_config(tmp_path)
    model = load_model(tmp_path, cfg, torch.float32, device, 128, load_format="dummy")
    g = torch.Generator().manual_seed(11)
    block_size, num_blocks = 16, 12
    meta = build_metadata([(6, 6), (3, 21), (1, 9), (1, 33)], block_size, num_blocks, device, g)
    positions = torch.cat([
        torch.arange(k - q, k) for q, k in zip(meta.query_lens_host, meta.seq_lens_host)
    ]).to(device)
    input_ids = torch.randint(0, cfg.vocab_size, (positions.shape[0],), generator=g).to(device)
    caches = torch.randn(
        cfg.num_hidden_layers, 2, num_blocks, block_size, cfg.num_key_value_heads,
        cfg.head_dim, generator=g,
    ).to(device)

    torch_caches = list(caches.clone().unbind(0))
    with torch.inference_mode():
        ref = model.forward(input_ids, positions, torch_caches, meta, TorchAttentionBackend())

    assert model.ops is layers.TORCH_OPS
    model.set_layer_ops(triton_ops())
    triton_caches = list(caches.clone().unbind(0))
    with torch.inference_mode():
        out = model.forward(input_ids, positions, triton_caches, meta, TritonAttentionBackend())

    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    for a, b in zip(triton_caches, torch_caches):
        torch.testing.assert_close(a, b, atol=CACHE_ATOL.get(variant, 1e-6), rtol=1e-6)
