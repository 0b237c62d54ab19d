"""Shared fixtures: the bundled model folder, a cached transformers reference, engines."""

from __future__ import annotations

from pathlib import Path

import pytest

from hybridllm.models.resolve import resolve_model

PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):",
    "Once upon a time, in a small village,",
    "List three colors:",
    "The quick brown fox",
    "Water boils at",
    "Translate to French: Good morning",
    "In 1969, humans first",
]


@pytest.fixture(scope="session")
def model_path() -> Path:
    return resolve_model(None)


@pytest.fixture(scope="session")
def hf_model(model_path: Path):
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval()


@pytest.fixture(scope="session")
def tokenizer(model_path: Path):
    from hybridllm.text.tokenizer import load_tokenizer

    return load_tokenizer(model_path)[0]
