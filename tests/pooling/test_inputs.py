"""Bad embedding input: each case raises ValueError naming the field and the limit, and a
refused call leaves nothing queued in the engine."""

from __future__ import annotations

import pytest

from hybridllm import LLM, PoolingParams, SamplingParams
from hybridllm.entrypoints.pooling.inputs import MAX_EMBEDDING_INPUTS, parse_embedding_inputs

BAD_PROMPTS = [
    ("", r"prompts: an input must not be an empty string"),
    (["fine", ""], r"prompts\[1\]: an input must not be an empty string"),
    ([], r"prompts must not be empty"),
    ([[]], r"prompts\[0\]: a token-id input must not be empty"),
    ([[101, 30522, 102]], r"prompt_token_ids: token id 30522 is out of vocabulary \[0, 30522\)"),
    ([101, -1, 102], r"prompt_token_ids: token id -1 is out of vocabulary \[0, 30522\)"),
    (["x"] * (MAX_EMBEDDING_INPUTS + 1), r"prompts: at most 2048 inputs per call, got 2049"),
    (123, r"prompts must be a string, a list of token ids, or a list of strings or token-id"),
    (None, r"prompts must be a string, a list of token ids, or a list of strings or token-id"),
    ({"text": "a"}, r"prompts must be a string, a list of token ids, or a list of strings"),
    ([1.5, 2.5], r"prompts\[0\]: expected a string or a list of token ids, got float"),
    ([["a", "b"]], r"prompts\[0\]: a token-id input must hold ints only"),
    ([[101, True, 102]], r"prompts\[0\]: a token-id input must hold ints only"),
    (["ok", 7.0], r"prompts\[1\]: expected a string or a list of token ids, got float"),
]


@pytest.mark.parametrize(("prompts", "message"), BAD_PROMPTS)
def test_bad_prompts(embed_llm, prompts, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        embed_llm.embed(prompts)
    assert not embed_llm.engine.has_unfinished_requests()
    assert not embed_llm.engine.scheduler.has_waiting()


def test_too_long_without_truncation_names_the_limit(embed_llm) -> None:
    long = "word " * 300  # 302 tokens
    with pytest.raises(
        ValueError,
        match=r"The input \(302 tokens\) is longer than the model's maximum of 256 tokens "
        r"\(max_seq_length\); pass truncate_prompt_tokens",
    ):
        embed_llm.embed(["short", long])
    assert not embed_llm.engine.has_unfinished_requests()
    with pytest.raises(ValueError, match=r"\(257 tokens\) .* maximum of 256 tokens"):
        embed_llm.embed([[101] + [2000] * 255 + [102]])
    [ok] = embed_llm.embed([[101] + [2000] * 254 + [102]])  # exactly 256: fine
    assert len(ok.prompt_token_ids) == 256


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (0, r"truncate_prompt_tokens must be -1 \(the model's limit\) or at least 1, got 0"),
        (-2, r"truncate_prompt_tokens must be -1 \(the model's limit\) or at least 1, got -2"),
        (1.5, r"truncate_prompt_tokens must be -1 .* got 1.5"),
        (True, r"truncate_prompt_tokens must be -1 .* got True"),
    ],
)
def test_bad_truncate_prompt_tokens_values(value, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        PoolingParams(truncate_prompt_tokens=value)


def test_truncate_prompt_tokens_limits(embed_llm) -> None:
    with pytest.raises(
        ValueError,
        match=r"truncate_prompt_tokens \(257\) is larger than the model's maximum of 256 tokens",
    ):
        embed_llm.embed("hello there", truncate_prompt_tokens=257)
    with pytest.raises(
        ValueError,
        match=r"truncate_prompt_tokens \(2\) must leave room for at least one token besides "
        r"the model's 2 special tokens",
    ):
        embed_llm.embed("hello there", truncate_prompt_tokens=2)
    assert not embed_llm.engine.has_unfinished_requests()


def test_bad_pooling_params(embed_llm) -> None:
    with pytest.raises(ValueError, match=r"normalize must be a bool or None, got 'yes'"):
        PoolingParams(normalize="yes")
    one_per_input = r"pooling_params: give one PoolingParams, or a list of one per input"
    with pytest.raises(ValueError, match=one_per_input + r" \(2\); got 3 items"):
        embed_llm.embed(["a", "b"], pooling_params=[PoolingParams()] * 3)
    with pytest.raises(ValueError, match=one_per_input + r" \(1\); got SamplingParams"):
        embed_llm.embed(["a"], pooling_params=SamplingParams())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=one_per_input + r" \(1\); got 1 items"):
        embed_llm.embed(["a"], pooling_params=[SamplingParams()])  # type: ignore[list-item]
    with pytest.raises(ValueError, match=r"an embedding model takes PoolingParams, got "
                       r"SamplingParams"):
        embed_llm.engine.add_request("x", "a", SamplingParams())  # type: ignore[arg-type]
    assert not embed_llm.engine.has_unfinished_requests()


def test_generate_on_embedding_model_names_the_task(embed_llm) -> None:
    for call in (lambda: embed_llm.generate("hi"),
                 lambda: embed_llm.chat([{"role": "user", "content": "hi"}])):
        with pytest.raises(ValueError, match=r"needs a generative model; .* is an embedding "
                           r"model \(task 'embed'\)"):
            call()


def test_llm_engine_refuses_an_embedding_model(embed_model_path) -> None:
    from hybridllm.config import EngineArgs
    from hybridllm.engine.llm_engine import LLMEngine

    with pytest.raises(ValueError, match=r"is an embedding model \(task 'embed'\): run it with "
                       r"PoolingEngine"):
        LLMEngine.from_engine_args(EngineArgs(model=str(embed_model_path)))


def test_embed_on_generative_model_names_the_task(model_path) -> None:
    llm = LLM(model=str(model_path), max_model_len=256, kv_cache_memory=16 << 20)
    for method in (llm.embed, llm.encode):
        with pytest.raises(ValueError, match=r"needs an embedding model; .* is a generative "
                           r"model \(task 'generate'\)"):
            method("hi")


def test_parse_embedding_inputs_shapes() -> None:
    assert parse_embedding_inputs("a") == ["a"]
    assert parse_embedding_inputs([1, 2, 3]) == [[1, 2, 3]]
    assert parse_embedding_inputs(["a", [1, 2]]) == ["a", [1, 2]]
    assert parse_embedding_inputs(("a", "b")) == ["a", "b"]
    assert len(parse_embedding_inputs(["x"] * MAX_EMBEDDING_INPUTS)) == 2048
    # 2,049 ids are one input, not 2,049 inputs: the length limit applies to it instead.
    assert parse_embedding_inputs([5] * 2049) == [[5] * 2049]
    with pytest.raises(ValueError, match=r"^input\[0\]: an input must not be an empty string"):
        parse_embedding_inputs([""], field="input")
