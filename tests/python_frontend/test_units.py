"""Unit checks of the Python frontend's request reading and messages, and of the text pipeline
it shares with the offline LLM (the conformance suite compares whole servers)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from hybridllm import _api
from hybridllm.text.chat_template import ChatTemplateError, render_chat

HI = [{"role": "user", "content": "hi"}]


def chat_error_of(value: Any) -> dict[str, Any]:
    """The core's refusal of a chat body, as the fallback (and the Rust frontend) answer it."""
    with pytest.raises(_api.ApiError) as e:
        _api.ChatCall(_context(), orjson.dumps(value))
    status, body, headers = e.value.args
    assert status == 400 and headers == []
    return orjson.loads(body)["error"]


def _context() -> _api.Context:
    tok = _api.Tokenizer.from_str(_word_tokenizer(["hi", "there"]))
    return _api.Context(
        tokenizer=tok, template=_api.ChatTemplate("{{ messages[0].content }}"),
        served_names=["m"], max_model_len=16, vocab_size=2, max_tokens_limit=None,
        max_beam_width=4, embed=False, bos_token="", eos_token="", eos_token_ids=[1],
        max_num_seqs=8, hidden_size=0, lowercase_inputs=False)


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
    e = chat_error_of(value)
    assert e["param"] == param
    assert e["message"].startswith("Invalid request: ")


def test_missing_field_is_named_in_the_message() -> None:
    def detokenize_error(value: Any) -> dict[str, Any]:
        with pytest.raises(_api.ApiError) as e:
            _api.detokenize(_context(), orjson.dumps(value))
        return orjson.loads(e.value.args[1])["error"]

    e = detokenize_error({})
    assert e["param"] is None and "tokens" in e["message"]
    assert detokenize_error({"temperature": "x"})["param"] is None  # no field of it


def test_stream_options_forms() -> None:
    ctx = _context()

    def plan(v: Any) -> _api.Response:
        body = {"messages": HI, "stream": True, "stream_options": v}
        return _api.ChatCall(ctx, orjson.dumps(body)).plan([0])[1]

    def usage(v: Any) -> bool:
        return plan(v).closing() is not None  # the usage chunk closes the stream

    assert [usage(v) for v in ({"include_usage": True}, {}, None)] == [True, False, False]
    for v in ([True], []):  # serde's struct-from-sequence is no longer taken
        assert chat_error_of({"messages": HI, "stream_options": v})["param"] == "stream_options"


def test_unhonoured_fields_are_refused_by_name() -> None:
    e = chat_error_of({"messages": HI, "structural_tag": "{}"})
    assert e == {"message": "structural_tag is not supported: use response_format or "
                            "structured_outputs instead.", "type": "BadRequestError",
                 "param": "structural_tag", "code": 400}
    assert chat_error_of({"messages": HI, "functions": [{"name": "f"}]})["param"] == "functions"
    tool = chat_error_of({"messages": HI, "tools": [{"type": "function"}]})
    assert tool["param"] == "tools[0].function"
    ctx = _context()
    for neutral in ({"response_format": {"type": "text"}}, {"tools": [], "tool_choice": "none"}):
        _api.ChatCall(ctx, orjson.dumps({"messages": HI, **neutral}))  # asks for nothing


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


def test_engine_request_sets_only_given_fields() -> None:
    """The core's validated parameters reach the worker's message with unset fields unset
    (the engine's defaults apply), max_tokens fitted to the context window."""
    body = {"messages": HI, "temperature": 0, "seed": 3, "logit_bias": {"+1": 1}, "stop": "x"}
    gen, resp = _api.ChatCall(_context(), orjson.dumps(body)).plan([0, 1])
    assert gen.sampling() == {"n": 1, "temperature": 0.0, "seed": 3, "max_tokens": 14,
                              "logit_bias": {1: 1.0}}
    assert (gen.stop, gen.n, gen.beam(), resp.stream) == (["x"], 1, None, False)
    e = chat_error_of({"messages": HI, "temperature": 3})
    assert e["message"] == "temperature must be in [0, 2], got 3." and e["param"] == "temperature"
