"""Each sampling parameter changes the output as documented, so ignoring one fails a test."""

from __future__ import annotations

import math

import pytest
import torch

from hybridllm import LLM, SamplingParams
from hybridllm.outputs import CompletionOutput
from hybridllm.sampling.processors import banned_tokens
from hybridllm.text.bad_words import bad_words_token_ids

PROMPT = "Once upon a time, in a small village,"
CHAT = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture(scope="module")
def llm(model_path) -> LLM:
    return LLM(model=str(model_path), seed=0)


def gen(llm: LLM, prompt=PROMPT, **kw) -> list[int]:
    return llm.generate(prompt, SamplingParams(**kw))[0].outputs[0].token_ids


@pytest.fixture(scope="module")
def greedy(llm: LLM) -> list[int]:
    return gen(llm, temperature=0, max_tokens=12, ignore_eos=True)


def test_chat_answers_paris(llm: LLM) -> None:
    out = llm.chat(CHAT, SamplingParams(temperature=0, max_tokens=32))[0].outputs[0]
    assert "Paris" in out.text
    assert out.text == "The capital of France is Paris."
    assert out.finish_reason == "stop" and out.stop_reason is None  # ended by EOS


def test_max_tokens_exact(llm: LLM) -> None:
    out = llm.generate(PROMPT, SamplingParams(temperature=0, max_tokens=7, ignore_eos=True))
    assert len(out[0].outputs[0].token_ids) == 7
    assert out[0].outputs[0].finish_reason == "length"


def test_seeded_sampling_reproducible_and_batch_independent(llm: LLM, greedy) -> None:
    params = SamplingParams(temperature=1.0, seed=1234, max_tokens=12, ignore_eos=True)
    alone = llm.generate(PROMPT, params)[0].outputs[0].token_ids
    mates = ["Hello there", "def f(x):", PROMPT, "The sky is"]
    other = SamplingParams(temperature=1.0, max_tokens=12, ignore_eos=True)  # unseeded mates
    batch = llm.generate(mates, [other, other, params, other])
    assert batch[2].outputs[0].token_ids == alone
    assert alone != greedy  # it really sampled
    different_seed = gen(llm, temperature=1.0, seed=4321, max_tokens=12, ignore_eos=True)
    assert different_seed != alone


@pytest.mark.parametrize(
    "kw", [{"top_k": 1}, {"top_p": 1e-6}, {"min_p": 1.0}], ids=["top_k", "top_p", "min_p"]
)
def test_truncation_to_one_token_is_greedy(llm: LLM, greedy, kw) -> None:
    # High temperature would scatter the samples; each truncation leaves only the argmax.
    assert gen(llm, temperature=5.0, seed=7, max_tokens=12, ignore_eos=True, **kw) == greedy
    assert gen(llm, temperature=5.0, seed=7, max_tokens=12, ignore_eos=True) != greedy


def test_top_k_limits_support(llm: LLM) -> None:
    """With top_k=2 every sampled token is one of the two best under the (raw) model."""
    out = llm.generate(
        PROMPT,
        SamplingParams(temperature=5.0, top_k=2, seed=3, max_tokens=10, logprobs=2,
                       ignore_eos=True),
    )[0].outputs[0]
    assert all(lp[t].rank <= 2 for t, lp in zip(out.token_ids, out.logprobs))


@pytest.mark.parametrize(
    "kw",
    [{"presence_penalty": 2.0}, {"frequency_penalty": 2.0}, {"repetition_penalty": 1.8}],
    ids=["presence", "frequency", "repetition"],
)
def test_penalties_reduce_repetition(llm: LLM, kw) -> None:
    prompt = "one one one one one one one one"
    base = gen(llm, prompt, temperature=0, max_tokens=16, ignore_eos=True)
    pen = gen(llm, prompt, temperature=0, max_tokens=16, ignore_eos=True, **kw)
    assert pen != base
    assert len(set(pen)) > len(set(base))


def test_logit_bias_forces_token(llm: LLM) -> None:
    out = gen(llm, temperature=0, max_tokens=5, ignore_eos=True, logit_bias={42: 100.0})
    assert out == [42] * 5


def test_allowed_token_ids_restrict_sampling(llm: LLM, greedy: list[int]) -> None:
    allowed = [42, 100, 7, greedy[1]]
    for kw in ({"temperature": 0}, {"temperature": 1.0, "seed": 3, "top_p": 0.9}):
        out = gen(llm, max_tokens=12, ignore_eos=True, allowed_token_ids=allowed, **kw)
        assert len(out) == 12 and set(out) <= set(allowed), out
    # Greedy over the allowed ones: not the free greedy answer (greedy[0] is not allowed).
    assert greedy[0] not in allowed
    assert gen(llm, temperature=0, max_tokens=12, ignore_eos=True,
               allowed_token_ids=allowed) != greedy
    # Bias cannot bring back a token that is not allowed.
    out = gen(llm, temperature=0, max_tokens=4, ignore_eos=True, allowed_token_ids=[7, 100],
              logit_bias={42: 100.0})
    assert set(out) <= {7, 100}, out


def test_bad_words_are_never_generated(llm: LLM) -> None:
    """A one-token word is banned everywhere, bare and after a space (greedy then equals a
    -100 bias on both ids); a longer word only where the output ends with its other tokens,
    so the answer keeps the same start and turns away at the word's last token."""
    tok = llm.get_tokenizer()
    ids = bad_words_token_ids(tok, ["Paris"])
    assert [[tok.decode([t]) for t in w] for w in ids] == [["Paris"], [" Paris"]]

    def chat(**kw: object) -> CompletionOutput:
        params = SamplingParams(temperature=0, max_tokens=24, **kw)  # type: ignore[arg-type]
        return llm.chat(CHAT, params, use_tqdm=False)[0].outputs[0]

    free = chat()
    assert free.text == "The capital of France is Paris."
    banned = chat(bad_words=["Paris"])
    assert "Paris" not in banned.text
    assert banned.token_ids == chat(logit_bias={w[0]: -100.0 for w in ids}).token_ids
    phrase = bad_words_token_ids(tok, ["capital of France"])
    assert [[tok.decode([t]) for t in w] for w in phrase] == [
        ["capital", " of", " France"], [" capital", " of", " France"]]
    out = chat(bad_words=["capital of France"]).token_ids
    start = free.token_ids.index(phrase[1][-1])  # where " France" came
    assert out[:start] == free.token_ids[:start] and out[start] != free.token_ids[start]
    for w in phrase:
        assert all(out[i:i + len(w)] != w for i in range(len(out)))
    assert bad_words_token_ids(tok, ["   ", ""]) == []  # whitespace bans nothing


def test_banned_tokens_follow_the_output_so_far() -> None:
    words = [[5], [1, 2, 3], [9, 9]]
    assert banned_tokens(words, []) == [5]
    assert banned_tokens(words, [1, 2]) == [5, 3]
    assert banned_tokens(words, [2, 1]) == [5]
    assert banned_tokens(words, [0, 9]) == [5, 9]
    assert banned_tokens([[1, 2, 3]], [2]) == []  # shorter than the word's prefix


def test_min_tokens_holds_off_eos(llm: LLM) -> None:
    short = llm.chat(CHAT, SamplingParams(temperature=0, max_tokens=64))[0].outputs[0]
    assert len(short.token_ids) < 20 and short.finish_reason == "stop"
    long = llm.chat(CHAT, SamplingParams(temperature=0, max_tokens=64, min_tokens=20))[0]
    ids = long.outputs[0].token_ids
    assert len(ids) >= 20 and 2 not in ids[:20]


def test_ignore_eos_runs_to_max_tokens(llm: LLM) -> None:
    out = llm.chat(CHAT, SamplingParams(temperature=0, max_tokens=24, ignore_eos=True))[0]
    assert len(out.outputs[0].token_ids) == 24 and out.outputs[0].finish_reason == "length"


def test_stop_token_ids(llm: LLM, greedy) -> None:
    stop = greedy[3]
    first = greedy.index(stop)
    out = llm.generate(
        PROMPT, SamplingParams(temperature=0, max_tokens=12, stop_token_ids=[stop])
    )[0].outputs[0]
    assert out.token_ids == greedy[: first + 1]
    assert out.finish_reason == "stop" and out.stop_reason == stop


def test_stop_string(llm: LLM) -> None:
    out = llm.chat(CHAT, SamplingParams(temperature=0, max_tokens=32, stop=["Paris"]))
    assert out[0].outputs[0].text == "The capital of France is "
    assert out[0].outputs[0].stop_reason == "Paris"
    kept = llm.chat(
        CHAT,
        SamplingParams(temperature=0, max_tokens=32, stop=["Paris"],
                       include_stop_str_in_output=True),
    )
    assert kept[0].outputs[0].text == "The capital of France is Paris"


def test_n_samples_distinct_and_seeded(llm: LLM) -> None:
    params = SamplingParams(n=3, temperature=1.0, seed=11, max_tokens=10, ignore_eos=True)
    a = llm.generate(PROMPT, params)[0]
    b = llm.generate(PROMPT, params)[0]
    assert [o.index for o in a.outputs] == [0, 1, 2]
    assert len({tuple(o.token_ids) for o in a.outputs}) == 3
    assert [o.token_ids for o in a.outputs] == [o.token_ids for o in b.outputs]


def test_logprobs_match_transformers(llm: LLM, hf_model, tokenizer) -> None:
    out = llm.generate(
        PROMPT, SamplingParams(temperature=0, max_tokens=3, logprobs=5, prompt_logprobs=2,
                               ignore_eos=True),
    )[0]
    ids = tokenizer.encode(PROMPT).ids
    full = ids + out.outputs[0].token_ids
    with torch.inference_mode():
        ref = hf_model(torch.tensor([full])).logits[0].float().log_softmax(-1)
    # Generated tokens: 5 alternatives plus the chosen one (already among them when greedy).
    for step, (token, lp) in enumerate(zip(out.outputs[0].token_ids, out.outputs[0].logprobs)):
        row = ref[len(ids) - 1 + step]
        top = row.topk(5)
        assert list(lp.keys()) == top.indices.tolist()
        assert lp[token].rank == 1
        for t, v in zip(top.indices.tolist(), top.values.tolist()):
            assert math.isclose(lp[t].logprob, v, abs_tol=1e-4)
    cum = sum(lp[t].logprob for t, lp in zip(out.outputs[0].token_ids, out.outputs[0].logprobs))
    assert math.isclose(out.outputs[0].cumulative_logprob, cum, abs_tol=1e-5)
    # Prompt: None for the first token, then the actual token plus the top 2.
    assert len(out.prompt_logprobs) == len(ids) and out.prompt_logprobs[0] is None
    for pos in range(1, len(ids)):
        entry = out.prompt_logprobs[pos]
        assert math.isclose(entry[ids[pos]].logprob, ref[pos - 1, ids[pos]].item(), abs_tol=1e-4)
        assert len(entry) in (2, 3)


@pytest.mark.parametrize(
    "kw, field",
    [
        ({"temperature": -1}, "temperature"),
        ({"top_p": 0}, "top_p"),
        ({"top_k": -5}, "top_k"),
        ({"min_p": 1.5}, "min_p"),
        ({"presence_penalty": 3}, "presence_penalty"),
        ({"frequency_penalty": -3}, "frequency_penalty"),
        ({"repetition_penalty": 0}, "repetition_penalty"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"min_tokens": -1}, "min_tokens"),
        ({"n": 0}, "n"),
        ({"logprobs": 21}, "logprobs"),
        ({"prompt_logprobs": -1}, "prompt_logprobs"),
        ({"logit_bias": {5: 101}}, "logit_bias"),
    ],
)
def test_bad_values_name_the_parameter(kw, field) -> None:
    with pytest.raises(ValueError, match=field):
        SamplingParams(**kw)


def test_bad_prompts_rejected(llm: LLM) -> None:
    with pytest.raises(ValueError, match="out of vocabulary"):
        llm.generate([[1, 2, 10**6]], SamplingParams(max_tokens=2))
    with pytest.raises(ValueError, match="maximum model length"):
        llm.generate([[1] * 9000], SamplingParams(max_tokens=2))
    assert gen(llm, temperature=0, max_tokens=3, ignore_eos=True)  # still serving
