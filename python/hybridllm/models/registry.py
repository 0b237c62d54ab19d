"""Which model class runs a checkpoint: config.json's `architectures` name, looked up here.

As in vLLM, each entry names a module and a class, imported only when that architecture is
loaded. A class brings its config type (`config_class`), read from the same folder. Anything
else is refused at start-up, naming the architecture and what is supported.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

from hybridllm.models.interfaces import DecoderConfig, ModelConfig

# architecture -> (module under hybridllm.models, class in it)
_TEXT_GENERATION_MODELS: dict[str, tuple[str, str]] = {
    "LlamaForCausalLM": ("llama", "LlamaForCausalLM"),
    # Llama's layout, each layer attending to its last sliding_window keys.
    "MistralForCausalLM": ("llama", "LlamaForCausalLM"),
    "Qwen2ForCausalLM": ("qwen2", "Qwen2ForCausalLM"),
    "Qwen3ForCausalLM": ("qwen3", "Qwen3ForCausalLM"),
    "Gemma3ForCausalLM": ("gemma3", "Gemma3ForCausalLM"),
}

# For a config.json without `architectures` (the bundled GGUF conversion writes none).
_MODEL_TYPES = {
    "llama": "LlamaForCausalLM",
    "mistral": "MistralForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
    "gemma3_text": "Gemma3ForCausalLM",
}


def supported_architectures() -> list[str]:
    return sorted(_TEXT_GENERATION_MODELS)


def architecture_of(raw: dict[str, Any]) -> str:
    """The architecture a config.json asks for: its first `architectures` entry, else the one
    its model_type stands for; Llama when it names neither, as before this registry."""
    archs = raw.get("architectures")
    if archs:
        return str(archs[0])
    model_type = raw.get("model_type")
    if model_type is None:
        return "LlamaForCausalLM"
    return _MODEL_TYPES.get(model_type, f"model_type {model_type!r}")


def _check_supported(arch: str) -> tuple[str, str]:
    entry = _TEXT_GENERATION_MODELS.get(arch)
    if entry is None:
        raise ValueError(
            f"architecture {arch} is not supported (supported: "
            f"{', '.join(supported_architectures())})"
        )
    return entry


def model_class(arch: str) -> Any:
    """The class (a `CausalLM`) that runs `arch`; its module is imported now."""
    module, name = _check_supported(arch)
    return getattr(importlib.import_module(f"hybridllm.models.{module}"), name)


def generation_config(folder: str | Path) -> DecoderConfig:
    """A generative model's config, or ValueError for an architecture not listed above."""
    folder = Path(folder)
    arch = architecture_of(json.loads((folder / "config.json").read_text()))
    config: DecoderConfig = model_class(arch).config_class.from_folder(folder, arch)
    return config


def model_config(folder: str | Path, task: str) -> ModelConfig:
    """The config of the model a folder holds: an encoder's for the embed task (the BERT
    family, models/bert.py), else a generative model's."""
    if task == "embed":
        from hybridllm.models.bert_config import BertConfig

        return BertConfig.from_folder(folder)
    return generation_config(folder)
