"""The model registry: config.json's architecture picks the class; anything else, and a
sliding window shorter than the context, is refused at start-up naming what is wrong."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from hybridllm import LLM
from hybridllm.config import EngineArgs
from hybridllm.models.registry import (
    architecture_of,
    generation_config,
    model_class,
    supported_architectures,
)
from tests.launch import start
from tests.models.checkpoints import copy_tokenizer, hf_config, make_checkpoint

SUPPORTED = ("Gemma3ForCausalLM, LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, "
             "Qwen3ForCausalLM")


def _folder(tmp_path: Path, raw: dict) -> Path:
    (tmp_path / "config.json").write_text(json.dumps(raw))
    return tmp_path


def _hf_dict(arch: str, **overrides) -> dict:
    raw = hf_config(arch, **overrides).to_dict()
    raw["architectures"] = [{"qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM",
                             "mistral": "MistralForCausalLM"}[arch]]
    return raw


def test_every_listed_architecture_imports() -> None:
    assert ", ".join(supported_architectures()) == SUPPORTED
    for arch in supported_architectures():
        cls = model_class(arch)
        assert hasattr(cls, "config_class") and hasattr(cls, "load_weights")
    assert model_class("MistralForCausalLM") is model_class("LlamaForCausalLM")


def test_unsupported_architecture_is_refused_at_start_up(tmp_path: Path, model_path: Path
                                                         ) -> None:
    folder = _folder(tmp_path, {"architectures": ["Phi3ForCausalLM"], "model_type": "phi3"})
    copy_tokenizer(model_path, folder)
    message = f"architecture Phi3ForCausalLM is not supported (supported: {SUPPORTED})"
    with pytest.raises(ValueError, match=rf"^{re.escape(message)}$"):
        LLM(model=str(folder))


def test_unsupported_architecture_stops_serve(tmp_path: Path, model_path: Path) -> None:
    """`hybridllm serve` exits before serving, its log naming the architecture and the list."""
    (tmp_path / "model").mkdir()
    folder = _folder(tmp_path / "model", {"architectures": ["Phi3ForCausalLM"]})
    copy_tokenizer(model_path, folder)
    with pytest.raises(RuntimeError) as err:
        start("python", tmp_path, model=folder, timeout=120)
    assert f"architecture Phi3ForCausalLM is not supported (supported: {SUPPORTED})" in str(
        err.value)


def test_architecture_without_architectures_field() -> None:
    assert architecture_of({"model_type": "qwen3"}) == "Qwen3ForCausalLM"
    assert architecture_of({"model_type": "mistral"}) == "MistralForCausalLM"
    # The bundled GGUF conversion writes model_type llama; older folders name nothing.
    assert architecture_of({"model_type": "llama"}) == "LlamaForCausalLM"
    assert architecture_of({"model_type": "gemma3_text"}) == "Gemma3ForCausalLM"
    assert architecture_of({}) == "LlamaForCausalLM"
    # Gemma 3's multimodal model (model_type gemma3) is not its text model.
    with pytest.raises(ValueError, match=r"architecture model_type 'gemma3' is not supported"):
        model_class(architecture_of({"model_type": "gemma3"}))


def test_mistral_window_shorter_than_the_context_is_served(tmp_path: Path) -> None:
    """Windowed attention runs in every attention path (parity: test_greedy_parity_archs)."""
    folder = _folder(tmp_path, _hf_dict("mistral", sliding_window=256))
    assert EngineArgs(model=str(folder)).resolve().max_model_len == 512
    cfg = generation_config(folder)
    assert cfg.sliding_window == 256
    assert cfg.layer_windows == (256, 256)


def test_windows_that_are_not_used(tmp_path: Path) -> None:
    # Mistral with sliding_window null; Qwen2 / Qwen3 keep a window with use_sliding_window off.
    for arch, overrides in (("mistral", {"sliding_window": None}),
                            ("qwen2", {"sliding_window": 64, "use_sliding_window": False}),
                            ("qwen3", {"sliding_window": 64, "use_sliding_window": False})):
        folder = _folder(tmp_path, _hf_dict(arch, **overrides))
        assert generation_config(folder).sliding_window is None, arch
        EngineArgs(model=str(folder)).resolve()
    # A Qwen2 config that does use it (layers from max_window_layers on) is refused.
    raw = _hf_dict("qwen2", sliding_window=64, use_sliding_window=True, max_window_layers=1)
    assert "sliding_attention" in raw["layer_types"]
    with pytest.raises(ValueError, match=r"sliding_window \(64\)"):
        EngineArgs(model=str(_folder(tmp_path, raw))).resolve()


def test_qwen3_checkpoint_without_a_k_norm_is_refused(tmp_path: Path, model_path: Path) -> None:
    make_checkpoint("qwen3", tmp_path, model_path)
    weights = load_file(str(tmp_path / "model.safetensors"))
    del weights["model.layers.1.self_attn.k_norm.weight"]
    save_file(weights, str(tmp_path / "model.safetensors"))
    with pytest.raises(ValueError, match=r"missing 1 tensors, e\.g\. "
                                         r"model\.layers\.1\.self_attn\.k_norm\.weight"):
        LLM(model=str(tmp_path))


def test_qwen2_loads_its_biases(tmp_path: Path, model_path: Path) -> None:
    """q / k / v biases although the config does not mention them; none on o_proj."""
    hf = make_checkpoint("qwen2", tmp_path, model_path)
    raw = json.loads((tmp_path / "config.json").read_text())
    assert "attention_bias" not in raw or not raw["attention_bias"]
    cfg = generation_config(tmp_path)
    from hybridllm.models.loader import load_model

    model = load_model(tmp_path, cfg, torch.float32, torch.device("cpu"), 64)
    attn = model.layers[0].self_attn
    ref = hf.model.layers[0].self_attn
    bias = torch.cat([ref.q_proj.bias, ref.k_proj.bias, ref.v_proj.bias])
    assert torch.equal(attn.qkv_proj.bias, bias)
    assert attn.o_proj.bias is None
