"""Shared fixtures: the bundled model folder, a cached transformers reference, engines."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hybridllm.config import KV_SPACE_ENV
from hybridllm.models.resolve import resolve_model

# A test-sized CPU KV cache (0.5 GiB: 11k tokens of the default model, more than its context)
# for every engine the suite starts, in-process or as a server process, which inherits the
# environment: the 2 GiB default is sized for serving, and allocating and zero-filling it for
# each engine cost the suite time and memory. Tests that size the cache themselves still do.
os.environ.setdefault(KV_SPACE_ENV, "0.5")


@pytest.fixture(scope="session")
def model_path() -> Path:
    return resolve_model(None)


@pytest.fixture(scope="session")
def hf_model(model_path: Path):
    from tests.golden.kinds import hf_model

    return hf_model()


@pytest.fixture(scope="session")
def tokenizer(model_path: Path):
    from hybridllm.text.tokenizer import load_tokenizer

    return load_tokenizer(model_path)[0]
