"""Embeddings and token ids of the bundled all-MiniLM-L6-v2 against sentence-transformers
(fp32, CPU) and transformers' tokenizer, on 59 varied sentences."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hybridllm import PoolingParams
from tests import golden
from tests.golden.kinds import ST_TRUNCATIONS, decode_embeddings, st_inputs, st_truncation_texts
from tests.pooling.conftest import MAX_SEQ_LENGTH, reference_ids
from tests.pooling.corpus import CORPUS

MIN_COSINE = 0.99999


def _embeddings(outputs) -> np.ndarray:
    return np.array([o.outputs.embedding for o in outputs], dtype=np.float64)


def test_corpus_covers_short_and_truncated(hf_tokenizer) -> None:
    lengths = [len(ids) for ids in hf_tokenizer(CORPUS)["input_ids"]]
    assert len(CORPUS) >= 50
    assert min(lengths) <= 3  # "[CLS] x [SEP]"
    assert sum(n > MAX_SEQ_LENGTH for n in lengths) >= 4


def test_token_ids_match_reference_tokenizer(embed_llm, hf_tokenizer) -> None:
    outputs = embed_llm.embed(CORPUS, truncate_prompt_tokens=-1)
    expected = reference_ids(hf_tokenizer, CORPUS, MAX_SEQ_LENGTH)
    for text, out, ids in zip(CORPUS, outputs, expected):
        assert out.prompt_token_ids == ids, text[:60]


@pytest.fixture(scope="module")
def st_reference() -> dict:
    """sentence-transformers' embeddings (tests/golden; test_live.py recomputes some)."""
    return golden.load("st_embeddings")


def test_embeddings_match_sentence_transformers(embed_llm, st_reference) -> None:
    ours = _embeddings(embed_llm.embed(CORPUS, truncate_prompt_tokens=-1))
    assert st_inputs()["corpus"] == CORPUS
    ref = decode_embeddings(st_reference["corpus"], len(CORPUS))
    assert ours.shape == ref.shape == (len(CORPUS), 384)
    cosines = (ours * ref).sum(1) / (np.linalg.norm(ours, axis=1) * np.linalg.norm(ref, axis=1))
    worst = int(cosines.argmin())
    assert cosines.min() >= MIN_COSINE, (CORPUS[worst][:60], cosines.min())
    np.testing.assert_allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-6)
    assert np.abs(ours - ref).max() < 1e-5


@pytest.mark.parametrize("limit", ST_TRUNCATIONS)
def test_truncate_prompt_tokens_matches_reference(
    embed_llm, st_reference, hf_tokenizer, limit: int
) -> None:
    texts = st_truncation_texts()
    outputs = embed_llm.embed(texts, pooling_params=PoolingParams(truncate_prompt_tokens=limit))
    assert [o.prompt_token_ids for o in outputs] == reference_ids(hf_tokenizer, texts, limit)
    assert all(len(o.prompt_token_ids) <= limit for o in outputs)
    assert all(o.prompt_token_ids[-1] == 102 for o in outputs)  # [SEP] kept
    ref = decode_embeddings(st_reference["truncated"][str(limit)], len(texts))
    cosines = (_embeddings(outputs) * ref).sum(1)
    assert cosines.min() >= MIN_COSINE


def test_token_id_prompts_equal_text_prompts(embed_llm) -> None:
    texts = CORPUS[:10]
    by_text = embed_llm.embed(texts)
    by_ids = embed_llm.embed([o.prompt_token_ids for o in by_text])
    assert [o.prompt_token_ids for o in by_ids] == [o.prompt_token_ids for o in by_text]
    assert np.abs(_embeddings(by_ids) - _embeddings(by_text)).max() <= 1e-6
    # One input as a token-id list, truncated keeping [SEP] last.
    [one] = embed_llm.embed(by_text[9].prompt_token_ids, truncate_prompt_tokens=4)
    assert one.prompt_token_ids == by_text[9].prompt_token_ids[:3] + [102]


def test_encode_is_mean_pooling_before_normalization(embed_llm, embed_model_path) -> None:
    """encode(): the pooled hidden state, checked against transformers' BertModel with
    sentence-transformers' mean pooling done by hand; normalize=True gives embed()'s vector."""
    from transformers import AutoModel

    texts = ["A short one.", CORPUS[16], CORPUS[23]]
    pooled = embed_llm.encode(texts)
    hf = AutoModel.from_pretrained(str(embed_model_path), dtype=torch.float32).eval()
    for out in pooled:
        ids = torch.tensor([out.prompt_token_ids])
        with torch.inference_mode():
            hidden = hf(input_ids=ids, attention_mask=torch.ones_like(ids)).last_hidden_state[0]
        expected = hidden.mean(0)
        assert out.outputs.data.shape == (384,)
        assert (out.outputs.data - expected).abs().max().item() < 1e-5
        assert abs(out.outputs.data.norm().item() - 1.0) > 0.1  # really not normalized
    normalized = embed_llm.encode(texts, pooling_params=PoolingParams(normalize=True))
    embedded = embed_llm.embed(texts)
    for a, b in zip(normalized, embedded):
        assert a.outputs.data.tolist() == b.outputs.embedding
    raw = embed_llm.embed(texts, pooling_params=PoolingParams(normalize=False))
    for a, b in zip(raw, pooled):
        assert a.outputs.embedding == b.outputs.data.tolist()
