"""LLM.beam_search equals transformers' beam search (`generate(num_beams=k,
num_return_sequences=k, do_sample=False)`), token for token and in order: with ignore_eos for
24 tokens, and with EOS allowed on short chat answers under every combination of
early_stopping False / True and length penalty 0.5 / 2.0. A differing beam must be a near-tie
(1e-4)."""

from __future__ import annotations

import pytest

from hybridllm import LLM, BeamSearchParams
from tests.beam.hf_reference import EOS, assert_equal_or_near_tie, hf_beams, hf_score
from tests.conftest import PROMPTS

MAX_CHAT = 20
CHATS = [
    "What is 2 + 2? Answer with a number only.",
    "Name one primary color. One word.",
    "What is the capital of Italy? One word.",
    "Say hello in Spanish. One word.",
    "Is water wet? Answer yes or no.",
    "What is the opposite of hot? One word.",
]


@pytest.fixture(scope="module")
def llm(model_path) -> LLM:
    return LLM(model=str(model_path))


@pytest.fixture(scope="module")
def chat_prompts(llm: LLM) -> list[list[int]]:
    tok = llm.get_tokenizer()
    template = llm.engine.tokenizer_info.chat_template
    from hybridllm.text.chat_template import render_chat

    out = []
    for q in CHATS:
        text = render_chat(template, [{"role": "user", "content": q}],
                           add_generation_prompt=True)
        out.append(tok.encode(text, add_special_tokens=False).ids)
    return out


@pytest.mark.parametrize("k", [2, 4])
def test_ignore_eos_equals_transformers(k: int, llm: LLM, hf_model, tokenizer) -> None:
    params = BeamSearchParams(beam_width=k, max_tokens=24, ignore_eos=True)
    prompts = PROMPTS[:6]
    outputs = llm.beam_search(prompts, params)
    assert len(outputs) == len(prompts) == 6
    for prompt, out in zip(prompts, outputs):
        ids = tokenizer.encode(prompt).ids
        assert len(out.sequences) == k
        gens = [s.tokens[len(ids) :] for s in out.sequences]
        assert all(s.tokens[: len(ids)] == ids for s in out.sequences)
        assert [len(g) for g in gens] == [24] * k
        ref = hf_beams(hf_model, ids, k, 24, ignore_eos=True)
        assert_equal_or_near_tie(hf_model, ids, gens, ref, True, 1.0)
        # cum_logprob is the beam's own (unpenalized) sum; scores are in descending order.
        scores = [s.cum_logprob / 24 for s in out.sequences]
        assert scores == sorted(scores, reverse=True)
        for s, g in zip(out.sequences, gens):
            assert abs(s.cum_logprob / 24 - hf_score(hf_model, ids, g, True, 1.0)) < 1e-4


# The full grid early_stopping {False, True} x length_penalty {0.5, 2.0} at k=4, and two of
# its corners again at k=2.
EOS_GRID = [(4, es, lp) for es in (False, True) for lp in (0.5, 2.0)] + [
    (2, False, 0.5), (2, True, 2.0)]


@pytest.mark.parametrize(("k", "early_stopping", "length_penalty"), EOS_GRID)
def test_eos_allowed_equals_transformers(
    k: int, early_stopping: bool | str, length_penalty: float, llm: LLM, hf_model,
    chat_prompts: list[list[int]],
) -> None:
    params = BeamSearchParams(
        beam_width=k, max_tokens=MAX_CHAT, length_penalty=length_penalty,
        early_stopping=early_stopping, include_stop_str_in_output=True,
    )
    outputs = llm.beam_search(chat_prompts, params)
    ended_by_eos = 0
    for ids, out in zip(chat_prompts, outputs):
        gens = [s.tokens[len(ids) :] for s in out.sequences]
        ref = hf_beams(hf_model, ids, k, MAX_CHAT, ignore_eos=False,
                       early_stopping=early_stopping, length_penalty=length_penalty)
        assert_equal_or_near_tie(hf_model, ids, gens, ref, False, length_penalty)
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
