"""bench embed's pure parts: the sentence set and sentence-transformers' padding share."""

from __future__ import annotations

import pytest

from hybridllm.bench.embed import make_sentences, padding_fraction


def test_padding_fraction_follows_sentence_transformers_batches() -> None:
    # Sorted longest text first: batches ("ccc", "bb") and ("a",) of token lengths (9, 5), (2).
    sentences = ["bb", "a", "ccc"]
    lengths = [5, 2, 9]
    assert padding_fraction(lengths, sentences, batch=2) == pytest.approx(4 / 20)
    assert padding_fraction(lengths, sentences, batch=1) == 0.0
    assert padding_fraction(lengths, sentences, batch=3) == pytest.approx((27 - 16) / 27)


def test_sentences_are_deterministic_and_mixed() -> None:
    words = [f"w{i}" for i in range(50)]
    a = make_sentences(words, 200, seed=3)
    assert a == make_sentences(words, 200, seed=3)
    assert a != make_sentences(words, 200, seed=4)
    counts = [len(s.split()) for s in a]
    assert min(counts) <= 5 and max(counts) >= 250
