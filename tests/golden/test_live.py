"""One case of each golden reference, recomputed by its library in every run and compared with
what the suite uses (the fixture, or the live computation where the fixture's key does not
match this machine): a reference that no longer matches its library fails here, not silently
in the parity tests."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from tests import golden
from tests.golden import kinds


def test_greedy_first_prompt(model_path: Path) -> None:
    inputs = kinds.greedy_inputs()
    ref = golden.load("greedy")["tokens"]
    assert len(ref) == len(inputs["prompt_ids"]) == len(kinds.PROMPTS)
    live = kinds.hf_greedy(inputs["prompt_ids"][0], inputs["max_tokens"])
    assert len(live) == kinds.GREEDY_MAX_TOKENS
    assert live == ref[0]


def _assert_beams_equal(live: list, ref: list) -> None:
    assert [b[0] for b in live] == [b[0] for b in ref]
    for (_, score, rescored), (_, ref_score, ref_rescored) in zip(live, ref):
        assert math.isclose(score, ref_score, abs_tol=1e-5)
        assert math.isclose(rescored, ref_rescored, abs_tol=1e-5)


def test_beams_one_case_of_each_part(model_path: Path) -> None:
    inputs = kinds.beams_inputs()
    ref = golden.load("beams")
    spec = inputs["ignore_eos"]
    k = kinds.BEAM_IGNORE_EOS_KS[0]
    live = kinds.beams_for(spec["prompt_ids"][0], k, spec["max_tokens"], True, False, 1.0)
    _assert_beams_equal(live, ref["ignore_eos"][kinds.beam_case(k)][0])
    spec = inputs["eos"]
    k, es, lp = kinds.BEAM_EOS_GRID[0]
    live = kinds.beams_for(spec["prompt_ids"][0], k, spec["max_tokens"], False, es, lp)
    _assert_beams_equal(live, ref["eos"][kinds.beam_case(k, es, lp)][0])
    # Every case of the reference has one entry per prompt, k beams each.
    for part in ("ignore_eos", "eos"):
        for k, es, lp in inputs[part]["cases"]:
            case = ref[part][kinds.beam_case(k, es, lp)]
            assert len(case) == len(inputs[part]["prompt_ids"])
            assert all(len(beams) == k for beams in case)


def test_lm_eval_hf_backend_first_document(model_path: Path) -> None:
    ref = golden.load("lm_eval_hf")
    assert len(ref["mc"]) == 24 and len(ref["gen"]) == 6
    # One document of each task (--limit 1): a batch of 4 requests, not the reference run's
    # padded batches of 8, so the loglikelihoods agree to float noise (1e-4: ten times
    # tighter than the 1e-3 the server is held to against the reference).
    live = kinds.lm_eval_compute(kinds.lm_eval_inputs(), limit=1)
    assert len(live["mc"]) == len(live["gen"]) == 1
    assert live["gen"][0] == ref["gen"][0]
    assert live["mc"][0]["acc"] == ref["mc"][0]["acc"]
    for (ll, greedy), (ref_ll, ref_greedy) in zip(live["mc"][0]["resps"], ref["mc"][0]["resps"],
                                                  strict=True):
        assert abs(ll - ref_ll) <= 1e-4 and greedy == ref_greedy


def test_sentence_transformers_first_sentences() -> None:
    inputs = kinds.st_inputs()
    ref = golden.load("st_embeddings")
    corpus = kinds.decode_embeddings(ref["corpus"], len(inputs["corpus"]))
    assert corpus.shape == (len(inputs["corpus"]), 384)
    # The first batch of the corpus (a live batch of its own: batching does not change
    # sentence-transformers' output beyond float noise).
    n = 4
    live = kinds.decode_embeddings(kinds.st_encode(inputs["corpus"][:n]), n)
    assert np.abs(live - corpus[:n]).max() < 1e-6
    texts, limit = inputs["truncated"]["texts"], inputs["truncated"]["limits"][0]
    live = kinds.decode_embeddings(kinds.st_encode(texts, limit), len(texts))
    stored = kinds.decode_embeddings(ref["truncated"][str(limit)], len(texts))
    assert np.abs(live - stored).max() < 1e-6
