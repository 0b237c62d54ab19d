"""Unit checks of the Python frontend's request reading and messages, and of the text pipeline
it shares with the offline LLM (the conformance suite compares whole servers)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from hybridllm.entrypoints.openai.errors import ApiError
from hybridllm.entrypoints.openai.protocol import (
    ChatCompletionRequest,
    DetokenizeRequest,
    Struct,
    parse_body,
)
from hybridllm.entrypoints.openai.validation import _num, validate
from hybridllm import _api
from hybridllm.text.chat_template import ChatTemplateError, render_chat

HI = [{"role": "user", "content": "hi"}]


def error_of(cls: type[Struct], value: Any) -> ApiError:
    with pytest.raises(ApiError) as e:
        parse_body(cls, orjson.dumps(value))
    return e.value


@pytest.mark.parametrize("value,param", [
    ({"messages": HI, "temperature": "x"}, "temperature"),
    ({"messages": HI, "stop_token_ids": [1, -1]}, "stop_token_ids"),  # the field, not its path
    ({"messages": HI, "logit_bias": {"7": "x"}}, "logit_bias"),
    ({"messages": HI, "stream_options": {"include_usage": 1}}, "stream_options"),
    ({"messages": HI, "stream_options": [1]}, "stream_options"),  # an object only
    ({"messages": HI, "stream_options": [True, False]}, "stream_options"),
    ({"n": "x", "messages": [], "model": 5}, "n"),  # the first mistyped field in the body
    ({"chat_template": 5, "messages": [], "n": "x"}, "chat_template"),
    ({"n": "x"}, "n"),  # a mistyped field before a missing one
    ({}, None),
    ([True], None),  # the body must be an object
    ([None, True], None),
    ([1], None),
    (None, None),
])
def test_param_is_the_first_mistyped_field(value: Any, param: str | None) -> None:
    e = error_of(ChatCompletionRequest, value)
    assert (e.status, e.param) == (400, param)
    assert e.message.startswith("Invalid request: ")


def test_missing_field_is_named_in_the_message() -> None:
    e = error_of(DetokenizeRequest, {})
    assert e.param is None and "tokens" in e.message
    assert error_of(DetokenizeRequest, {"temperature": "x"}).param is None  # no field of it


def test_stream_options_forms() -> None:
    def usage(v: Any) -> bool:
        o = ChatCompletionRequest.model_validate({"messages": HI, "stream_options": v})
        return o.stream_options is not None and o.stream_options.include_usage

    assert [usage(v) for v in ({"include_usage": True}, {}, None)] == [True, False, False]
    for v in ([True], []):  # serde's struct-from-sequence is no longer taken
        assert error_of(ChatCompletionRequest, {"messages": HI, "stream_options": v}).param == \
            "stream_options"


@pytest.mark.parametrize("x,want", [(3.0, "3"), (2.5, "2.5"), (-2.0, "-2"), (1e-7, "0.0000001"),
                                    (1e20, "100000000000000000000"), (0.0, "0"), (-0.0, "-0")])
def test_numbers_in_messages_as_rust_writes_them(x: float, want: str) -> None:
    assert _num(x) == want


def test_validate_sets_only_given_fields() -> None:
    req = ChatCompletionRequest.model_validate({"messages": HI, "temperature": 0, "seed": 3,
                                                "logit_bias": {"+5": 1}, "stop": "x"})
    p = validate(req, None, 100)
    assert p.sampling.HasField("temperature") and not p.sampling.HasField("top_p")
    assert (p.sampling.seed, dict(p.sampling.logit_bias), p.stop, p.n) == (3, {5: 1.0}, ["x"], 1)
    with pytest.raises(ApiError, match=r"^temperature must be in \[0, 2\], got 3\.$"):
        validate(ChatCompletionRequest.model_validate({"messages": HI, "temperature": 3}),
                 None, 100)


def test_chat_rendering_shared_with_llm_chat() -> None:
    source = "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
    parts = [{"role": "user", "content": [{"type": "text", "text": "a"}, {"text": "b"}]},
             {"role": "assistant", "content": "The answer is"}]
    assert render_chat(source, parts) == "<user>a\nb<assistant>The answer is"
    assert render_chat(source, parts, continue_final_message=True) == \
        "<user>a\nb<assistant>The answer is"
    with pytest.raises(ChatTemplateError, match="messages\\[0\\] must be an object") as e:
        render_chat(source, [5])
    assert e.value.param == "messages"


def test_sequence_text_finish_reasons() -> None:
    """The core's per-sequence text, as the fallback and the offline engine call it: a stop
    string is cut and reported, a stop token id is reported (EOS is not), and text held back
    for a possible stop string comes out when the sequence ends for its length."""
    tok = _api.Tokenizer.from_str(_word_tokenizer(["Hello", " S", "T", "OP", " more", "</s>"]))
    s = _api.SequenceText([], ["STOP"], False)
    assert [s.push(tok, [i]) for i in (0, 1, 2)] == [("Hello", None, None), (" ", None, None),
                                                     ("", None, None)]  # "ST" held back
    assert s.push(tok, [3]) == ("", "stop", "STOP") and s.finished
    s = _api.SequenceText([], ["STOP"], False)
    assert s.push(tok, [0, 1, 2], "length") == ("Hello ST", "length", None)
    s = _api.SequenceText([], [], False)
    assert s.push(tok, [0, 5], "stop", 5, [5]) == ("Hello", "stop", None)  # EOS: no reason
    s = _api.SequenceText([], [], False)
    assert s.push(tok, [0, 4], "stop", 4, [5]) == ("Hello", "stop", 4)  # a stop token id
    with pytest.raises(ValueError, match="engine_finish must be"):
        s.push(tok, [0], "done")


def _word_tokenizer(words: list[str]) -> str:
    """A tokenizer.json whose tokens are whole words (decoded by plain concatenation)."""
    return orjson.dumps({
        "version": "1.0", "truncation": None, "padding": None, "normalizer": None,
        "added_tokens": [], "pre_tokenizer": None, "post_processor": None,
        "decoder": {"type": "Fuse"},
        "model": {"type": "WordLevel", "vocab": {w: i for i, w in enumerate(words)},
                  "unk_token": words[0]},
    }).decode()
