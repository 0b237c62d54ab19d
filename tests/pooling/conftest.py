"""Fixtures: the bundled embedding model, our LLM over it, and transformers'
AutoTokenizer over the same folder (sentence-transformers' embeddings are a golden reference)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hybridllm.models.resolve import DEFAULT_EMBEDDING_MODEL, resolve_model

MAX_SEQ_LENGTH = 256  # the bundled model's sentence_bert_config.json


@pytest.fixture(scope="session")
def embed_model_path() -> Path:
    return resolve_model(DEFAULT_EMBEDDING_MODEL)


@pytest.fixture(scope="session")
def embed_llm(embed_model_path: Path):
    from hybridllm import LLM

    return LLM(model=str(embed_model_path))


@pytest.fixture(scope="session")
def hf_tokenizer(embed_model_path: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(embed_model_path))


def reference_ids(hf_tokenizer, texts: list[str], max_length: int) -> list[list[int]]:
    """Token ids exactly as sentence-transformers asks the tokenizer for them (padded batch,
    truncation="longest_first"), padding taken off by the attention mask."""
    enc = hf_tokenizer(texts, padding=True, truncation="longest_first", max_length=max_length)
    return [
        [t for t, m in zip(ids, mask) if m]
        for ids, mask in zip(enc["input_ids"], enc["attention_mask"])
    ]
