"""LLM.beam_search equals transformers' beam search (`generate(num_beams=k,
num_return_sequences=k, do_sample=False)`), token for token and in order: with ignore_eos for
24 tokens, and with EOS allowed on short chat answers under every combination of
early_stopping False / True and length penalty 0.5 / 2.0. A differing beam must be a near-tie
(1e-4)."""

from __future__ import annotations

import pytest

from hybridllm import LLM, BeamSearchParams
from tests import golden
from tests.beam.hf_reference import assert_equal_or_near_tie, rescorer
from tests.golden.kinds import BEAM_CHAT_TOKENS as MAX_CHAT
from tests.golden.kinds import BEAM_CHATS as CHATS
from tests.golden.kinds import (
    BEAM_EOS_GRID,
    BEAM_IGNORE_EOS_KS,
    BEAM_IGNORE_EOS_TOKENS,
    EOS,
    PROMPTS,
    beam_case,
    chat_ids,
)


@pytest.fixture(scope="module")
def llm(model_path) -> LLM:
    return LLM(model=str(model_path))


@pytest.fixture(scope="module")
def reference(model_path) -> dict:
    """transformers' beams (tests/golden; test_live.py recomputes a case of it every run)."""
    return golden.load("beams")


@pytest.fixture(scope="module")
def chat_prompts(llm: LLM) -> list[list[int]]:
    """The chat questions through the model's template, as the reference's inputs were made;
    rendered here by the engine's own template and tokenizer."""
    tok = llm.get_tokenizer()
    template = llm.engine.tokenizer_info.chat_template
    from hybridllm.text.chat_template import render_chat

    out = []
    for q in CHATS:
        text = render_chat(template, [{"role": "user", "content": q}],
                           add_generation_prompt=True)
        out.append(tok.encode(text, add_special_tokens=False).ids)
    assert out == [chat_ids(q) for q in CHATS]
    return out


@pytest.mark.parametrize("k", BEAM_IGNORE_EOS_KS)
def test_ignore_eos_equals_transformers(k: int, llm: LLM, tokenizer, reference: dict) -> None:
    n = BEAM_IGNORE_EOS_TOKENS
    params = BeamSearchParams(beam_width=k, max_tokens=n, ignore_eos=True)
    prompts = PROMPTS[:6]
    outputs = llm.beam_search(prompts, params)
    assert len(outputs) == len(prompts) == 6
    refs = reference["ignore_eos"][beam_case(k)]
    for prompt, out, ref in zip(prompts, outputs, refs):
        ids = tokenizer.encode(prompt).ids
        assert len(out.sequences) == k
        gens = [s.tokens[len(ids) :] for s in out.sequences]
        assert all(s.tokens[: len(ids)] == ids for s in out.sequences)
        assert [len(g) for g in gens] == [n] * k
        rescore = rescorer(ids, True, 1.0)
        assert_equal_or_near_tie(gens, ref, rescore)
        # cum_logprob is the beam's own (unpenalized) sum; scores are in descending order.
        scores = [s.cum_logprob / n for s in out.sequences]
        assert scores == sorted(scores, reverse=True)
        for s, g, (ref_gen, _, ref_rescored) in zip(out.sequences, gens, ref):
            hf = ref_rescored if g == ref_gen else rescore(g)
            assert abs(s.cum_logprob / n - hf) < 1e-4


@pytest.mark.parametrize(("k", "early_stopping", "length_penalty"), BEAM_EOS_GRID)
def test_eos_allowed_equals_transformers(
    k: int, early_stopping: bool | str, length_penalty: float, llm: LLM,
    chat_prompts: list[list[int]], reference: dict,
) -> None:
    params = BeamSearchParams(
        beam_width=k, max_tokens=MAX_CHAT, length_penalty=length_penalty,
        early_stopping=early_stopping, include_stop_str_in_output=True,
    )
    outputs = llm.beam_search(chat_prompts, params)
    refs = reference["eos"][beam_case(k, early_stopping, length_penalty)]
    ended_by_eos = 0
    for ids, out, ref in zip(chat_prompts, outputs, refs):
        gens = [s.tokens[len(ids) :] for s in out.sequences]
        assert_equal_or_near_tie(gens, ref, rescorer(ids, False, length_penalty))
        for s, g in zip(out.sequences, gens):
            assert (s.finish_reason == "stop") == (g[-1] == EOS)
            ended_by_eos += g[-1] == EOS
    assert ended_by_eos > 0  # short answers: EOS really ends beams (4+ of 12-24 returned)


def test_eos_left_out_of_tokens_by_default(llm: LLM, chat_prompts: list[list[int]]) -> None:
    with_eos, without = (
        llm.beam_search(chat_prompts[:2], BeamSearchParams(
            beam_width=2, max_tokens=MAX_CHAT, include_stop_str_in_output=flag))
        for flag in (True, False)
    )
    for a, b in zip(with_eos, without):
        for sa, sb in zip(a.sequences, b.sequences):
            assert sa.finish_reason == sb.finish_reason == "stop"
            assert sa.tokens == sb.tokens + [EOS]
            assert sa.cum_logprob == sb.cum_logprob
