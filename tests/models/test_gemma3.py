"""Gemma 3 text beyond greedy parity (tests/models/test_greedy_parity_archs.py runs that): its
logits equal transformers' on a prompt longer than the local layers' window (soft-capping is
monotonic, so greedy tokens cannot see it), and the older config.json layout reads the same."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from hybridllm.attention.torch_ref import TorchAttentionBackend
from hybridllm.kernels.testing import build_metadata
from hybridllm.models.gemma3 import Gemma3Config
from hybridllm.models.loader import load_model
from hybridllm.models.registry import generation_config
from tests.models.checkpoints import make_checkpoint


def test_logits_match_transformers(tmp_path: Path, model_path: Path) -> None:
    hf = make_checkpoint("gemma3", tmp_path, model_path)
    cfg = generation_config(tmp_path)
    assert isinstance(cfg, Gemma3Config) and cfg.layer_windows == (20, None)
    model = load_model(tmp_path, cfg, torch.float32, torch.device("cpu"), 128)
    g = torch.Generator().manual_seed(3)
    n, block_size, num_blocks = 45, 16, 8  # 45 tokens > the window of 20
    ids = torch.randint(0, cfg.vocab_size, (n,), generator=g)
    meta = build_metadata([(n, n)], block_size, num_blocks, "cpu", g)
    caches = [
        torch.zeros(2, num_blocks, block_size, cfg.num_key_value_heads, cfg.head_dim)
        for _ in range(cfg.num_hidden_layers)
    ]
    with torch.inference_mode():
        hidden = model(ids, torch.arange(n), caches, meta, TorchAttentionBackend())
        got = model.compute_logits(hidden)
        expected = hf(ids[None]).logits[0].float()
    cap = cfg.final_logit_softcapping
    assert cap == 30.0 and float(expected.abs().max()) < cap
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)


def test_older_config_layout(tmp_path: Path) -> None:
    """rope_theta / rope_local_base_freq / rope_scaling and sliding_window_pattern (every
    pattern-th layer global), as Gemma 3's released config.json files have them."""
    raw = {
        "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text",
        "vocab_size": 300, "hidden_size": 64, "intermediate_size": 128,
        "num_hidden_layers": 6, "num_attention_heads": 4, "num_key_value_heads": 1,
        "head_dim": 32, "query_pre_attn_scalar": 32, "sliding_window": 512,
        "sliding_window_pattern": 3, "rope_theta": 1e6, "rope_local_base_freq": 1e4,
        "rope_scaling": {"rope_type": "linear", "factor": 8.0}, "eos_token_id": [1, 106],
    }
    (tmp_path / "config.json").write_text(json.dumps(raw))
    cfg = generation_config(tmp_path)
    assert isinstance(cfg, Gemma3Config)
    assert cfg.local_layers == (True, True, False, True, True, False)
    assert cfg.layer_windows == (512, 512, None, 512, 512, None)
    assert (cfg.rope_theta, cfg.rope_local_theta) == (1e6, 1e4)
    assert cfg.rope_scaling == {"rope_type": "linear", "factor": 8.0}
    assert cfg.eos_token_ids == (1, 106) and cfg.tie_word_embeddings
    assert cfg.final_logit_softcapping is None
