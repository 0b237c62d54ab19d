"""The offline engine's own parameter checks name the field they refuse (ParamError.param, which
the worker sends on as RequestError.param), and say what the API says where the API checks the
same rule (the core's validation, called through hybridllm._api)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from hybridllm import _api
from hybridllm.sampling_params import BeamSearchParams, ParamError, SamplingParams

SAMPLING_REFUSALS = [
    ({"n": 0}, "n"),
    ({"temperature": -1}, "temperature"),
    ({"top_p": 0}, "top_p"),
    ({"top_p": 1.5}, "top_p"),
    ({"top_k": -5}, "top_k"),
    ({"min_p": 1.5}, "min_p"),
    ({"presence_penalty": 3}, "presence_penalty"),
    ({"frequency_penalty": -3}, "frequency_penalty"),
    ({"repetition_penalty": 0}, "repetition_penalty"),
    ({"repetition_penalty": 2.5}, "repetition_penalty"),
    ({"max_tokens": 0}, "max_tokens"),
    ({"min_tokens": -1}, "min_tokens"),
    ({"max_tokens": 2, "min_tokens": 3}, "min_tokens"),
    ({"logprobs": 21}, "logprobs"),
    ({"prompt_logprobs": -1}, "prompt_logprobs"),
    ({"stop_token_ids": [3, -1]}, "stop_token_ids"),
    ({"stop": ["x", ""]}, "stop"),
    ({"logit_bias": {5: 100.5}}, "logit_bias"),
    ({"allowed_token_ids": []}, "allowed_token_ids"),
]


@pytest.mark.parametrize("kw, param", SAMPLING_REFUSALS)
def test_each_sampling_check_names_its_field(kw: dict[str, Any], param: str) -> None:
    with pytest.raises(ParamError) as e:
        SamplingParams(**kw)
    assert e.value.param == param
    assert isinstance(e.value, ValueError)  # what callers of the offline engine catch


@pytest.mark.parametrize("kw, param", [
    ({"beam_width": 0}, "beam_width"),
    ({"max_tokens": 0}, "max_tokens"),
    ({"temperature": 0.5}, "temperature"),
    ({"early_stopping": "sometimes"}, "early_stopping"),
])
def test_each_beam_search_check_names_its_field(kw: dict[str, Any], param: str) -> None:
    with pytest.raises(ParamError) as e:
        BeamSearchParams(**{"beam_width": 2, "max_tokens": 4, **kw})
    assert e.value.param == param


def _api_refusal(fields: dict[str, Any]) -> tuple[str, str]:
    """The API's (the core's) refusal of a completions request with these fields: its message
    and param."""
    words = ["hi", "there"]
    tok = _api.Tokenizer.from_str(orjson.dumps({
        "version": "1.0", "truncation": None, "padding": None, "normalizer": None,
        "added_tokens": [], "pre_tokenizer": None, "post_processor": None, "decoder": None,
        "model": {"type": "WordLevel", "vocab": {w: i for i, w in enumerate(words)},
                  "unk_token": "hi"},
    }).decode())
    ctx = _api.Context(
        tokenizer=tok, template=None, served_names=["m"], max_model_len=16, vocab_size=200,
        max_tokens_limit=None, max_beam_width=4, embed=False, bos_token="", eos_token="",
        eos_token_ids=[1], max_num_seqs=8, hidden_size=0, lowercase_inputs=False)
    with pytest.raises(_api.ApiError) as e:
        _api.CompletionCall(ctx, orjson.dumps({"prompt": "hi", **fields}))
    error = orjson.loads(e.value.args[1])["error"]
    return error["message"], error["param"]


# The rules both check. Not here, on purpose: n and temperature (the API's [1, 128] and [0, 2]
# are narrower than the offline engine's, which follows vLLM's offline SamplingParams: any n
# from 1, any temperature from 0), and stop_token_ids / stop strings (the API checks them
# against the vocabulary / not at all: the engine never sees stop strings).
SHARED_RULES = [kw for kw, _ in SAMPLING_REFUSALS
                if not kw.keys() & {"n", "temperature", "stop_token_ids", "stop"}]


@pytest.mark.parametrize("kw", SHARED_RULES)
def test_where_the_api_checks_the_same_rule_the_message_is_the_same(kw: dict[str, Any]) -> None:
    with pytest.raises(ParamError) as e:
        SamplingParams(**kw)
    body = {k: ({str(t): b for t, b in v.items()} if k == "logit_bias" else v)
            for k, v in kw.items()}
    assert _api_refusal(body) == (str(e.value), e.value.param)
