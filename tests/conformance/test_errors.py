"""The error table: the same status, error type, param and code, and the same message
(but for the JSON parser's and deserializer's own wording), in every frontend."""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest

from tests.conformance.conftest import (
    MAX_MODEL_LEN,
    assert_equal,
    assert_same,
    parse_sse,
    parsed,
)

HI = '[{"role":"user","content":"hi"}]'
C = "/v1/chat/completions"
P = "/v1/completions"
PARSER = "parser"  # the JSON parser's own words (serde_json / orjson)
DESERIALIZER = "deserializer"  # serde's / pydantic's own words; the field must be the same
TEMPLATE = "template"  # minijinja's / Jinja2's syntax error after our prefix


@dataclass(frozen=True)
class Foreign:
    """An error message in another library's words, which may differ between frontends;
    `rust`: the Rust frontend's exact message, where the table pins it."""

    kind: str
    rust: str | None = None


PARSE_ERROR = Foreign(PARSER)
TYPE_ERROR = Foreign(DESERIALIZER)
NOT_OBJECT = "Invalid request: the body must be a JSON object."

# (path, raw body, status, message): the expected text, None (the same text in every
# frontend, not pinned here), or Foreign.
CASES: list[tuple[str, str | bytes, int, str | Foreign | None]] = [
    (C, "{bad", 400,
     Foreign(PARSER, "Invalid JSON body: key must be a string at line 1 column 2")),
    (C, "", 400,
     Foreign(PARSER, "Invalid JSON body: EOF while parsing a value at line 1 column 0")),
    (C, '{"messages":[1,2,]}', 400,
     Foreign(PARSER, "Invalid JSON body: trailing comma at line 1 column 18")),
    (C, '{"messages":' + HI + '} x', 400, PARSE_ERROR),
    (C, '{"messages":' + HI + ',"temperature":1e400}', 400, PARSE_ERROR),
    (C, '{"messages":"\\ud800"}', 400, PARSE_ERROR),
    (C, '\ufeff{"messages":' + HI + '}', 400, PARSE_ERROR),
    (C, b'{"messages":"\xff"}', 400, PARSE_ERROR),
    # serde_json refuses more than 127 nested arrays/objects.
    (C, '{"messages":' + HI + ',"x":' + "[" * 127 + "]" * 127 + "}", 400, PARSE_ERROR),
    (C, '{"messages":' + HI + ',\n "temperature": "x"\n}', 400, Foreign(
        DESERIALIZER, 'Invalid request: temperature: invalid type: string "x", expected f64')),
    (C, '{"messages":' + HI + ',"n":1.5}', 400, TYPE_ERROR),
    (C, '{"messages":"x"}', 400, TYPE_ERROR),
    (C, '{"model":5,"messages":[]}', 400, TYPE_ERROR),
    (C, "{}", 400, Foreign(DESERIALIZER, "Invalid request: missing field `messages`")),
    (C, "[1]", 400, NOT_OBJECT),
    (C, "null", 400, NOT_OBJECT),
    (C, '{"messages":' + HI + ',"stream_options":{"include_usage":1}}', 400, TYPE_ERROR),
    (C, '{"messages":' + HI + ',"stop_token_ids":[-1]}', 400, TYPE_ERROR),
    (C, '{"messages":' + HI + ',"messages":[]}', 400, None),
    (C, '{"messages":' + HI + ',"seed":1e3}', 400, TYPE_ERROR),
    (C, '{"messages":' + HI + ',"top_k":"a\\nb"}', 400, TYPE_ERROR),
    (C, '{"messages":' + HI + ',"top_k":1.0}', 400, TYPE_ERROR),
    (C, '{"messages":' + HI + ',"max_tokens":9223372036854775808}', 400, TYPE_ERROR),
    (C, '{"messages":' + HI + ',"max_tokens":18446744073709551616}', 400, TYPE_ERROR),
    (C, '{"messages":' + HI + ',"logit_bias":{"1":"x"}}', 400, TYPE_ERROR),
    # The field named is the first mistyped one in the body (own or flattened alike), else
    # a missing one; a body must be an object, and so must stream_options.
    (C, '{"messages":[],"n":"x","model":5}', 400, TYPE_ERROR),
    (C, '{"chat_template":5,"messages":"x"}', 400, TYPE_ERROR),
    (C, '{"messages":[],"chat_template":5,"n":"x"}', 400, TYPE_ERROR),
    (C, '{"n":"x"}', 400, TYPE_ERROR),
    (C, '{"chat_template":5}', 400, TYPE_ERROR),
    (C, "[true]", 400, NOT_OBJECT),
    (C, "[null,true]", 400, NOT_OBJECT),
    (C, '{"messages":' + HI + ',"stream_options":[true,false]}', 400, TYPE_ERROR),
    (C, '{"messages":' + HI + ',"stream_options":[1,2]}', 400, TYPE_ERROR),
    # Were 200 (serde read a struct from the sequence of its fields): now 400 everywhere.
    (C, '{"messages":' + HI + ',"max_tokens":2,"stream_options":[true],"stream":true}', 400,
     TYPE_ERROR),
    (C, '{"messages":' + HI + ',"max_tokens":2,"stream_options":[],"stream":true}', 400,
     TYPE_ERROR),
    (C, '{"messages":' + HI + ',"stream_options":5}', 400, TYPE_ERROR),
    (C, '{"messages":' + HI + ',"temperature":3}', 400, "temperature must be in [0, 2], got 3."),
    (C, '{"messages":' + HI + ',"temperature":2.5}', 400, None),
    (C, '{"messages":' + HI + ',"temperature":-0.0000001}', 400,
     "temperature must be in [0, 2], got -0.0000001."),
    (C, '{"messages":' + HI + ',"temperature":1e20}', 400,
     "temperature must be in [0, 2], got 100000000000000000000."),
    (C, '{"messages":' + HI + ',"top_p":0}', 400, "top_p must be in (0, 1], got 0."),
    (C, '{"messages":' + HI + ',"min_p":-0.1}', 400, None),
    (C, '{"messages":' + HI + ',"presence_penalty":-2.5}', 400, None),
    (C, '{"messages":' + HI + ',"repetition_penalty":0}', 400, None),
    (C, '{"messages":' + HI + ',"top_k":-2}', 400, None),
    (C, '{"messages":' + HI + ',"n":0}', 400, "n must be in [1, 128], got 0."),
    (C, '{"messages":' + HI + ',"n":2,"best_of":3}', 400, None),
    (C, '{"messages":' + HI + ',"max_tokens":0}', 400, None),
    (C, '{"messages":' + HI + ',"max_completion_tokens":-1}', 400, None),
    (C, '{"messages":' + HI + ',"max_tokens":2,"min_tokens":3}', 400, None),
    # Found by schemathesis: beyond the wire type's u32 (was a 500 / a silent wrap).
    (P, '{"prompt":"hi","min_tokens":11257324413}', 400,
     "min_tokens must be in [0, max_tokens], got 11257324413."),
    (C, '{"messages":' + HI + ',"logprobs":true,"top_logprobs":21}', 400, None),
    (C, '{"messages":' + HI + ',"top_logprobs":2}', 400, None),
    (C, '{"messages":' + HI + ',"prompt_logprobs":-1}', 400, None),
    (C, '{"messages":' + HI + ',"logit_bias":{"x":1}}', 400, None),
    (C, '{"messages":' + HI + ',"logit_bias":{"a\\"b":1}}', 400, None),
    (C, '{"messages":' + HI + ',"logit_bias":{"5":-100.5}}', 400, None),
    (C, '{"messages":' + HI + ',"logit_bias":{"99999999":1}}', 400, None),
    (C, '{"messages":' + HI + ',"logit_bias":{"5":101}}', 400, None),
    (C, '{"messages":' + HI + ',"stop_token_ids":[99999999]}', 400, None),
    (C, '{"messages":' + HI + ',"stop":5}', 400, None),
    (C, '{"messages":[]}', 400, None),
    (C, '{"messages":[5]}', 400, None),
    (C, '{"messages":[{"content":"x"}]}', 400, None),
    (C, '{"messages":[{"role":"user","content":[{"type":"image_url"}]}]}', 400, None),
    (C, '{"messages":' + HI + ',"chat_template":"{% if %}"}', 400, Foreign(TEMPLATE)),
    (C, '{"messages":' + HI + ',"chat_template":"{{ raise_exception(\'nope\') }}"}', 400,
     "nope"),
    (C, '{"messages":' + HI + ',"continue_final_message":true,"add_generation_prompt":true}',
     400, None),
    (C, '{"messages":' + HI + ',"max_tokens":600}', 400,
     f"This model's maximum context length is {MAX_MODEL_LEN} tokens. However, you requested "
     f"631 tokens (31 in the messages, 600 in the completion). Please reduce the length of the "
     "messages or completion."),
    # Documented fields the server does not honour are refused by name, never ignored.
    (C, '{"messages":' + HI + ',"structural_tag":"{}"}', 400,
     "structural_tag is not supported: use response_format or structured_outputs instead."),
    # Output constraints llguidance cannot enforce (more: tests/conformance/test_structured.py).
    (C, '{"messages":' + HI + ',"response_format":{"type":"json_schema","json_schema":'
        '{"name":"x","schema":{"type":"nonsense"}}}}', 400,
     "response_format.json_schema.schema cannot be enforced: Invalid type: nonsense."),
    # Tool calling's refusals (more: tests/conformance/test_tools.py).
    (C, '{"messages":' + HI + ',"tools":[{"type":"function","function":{"name":"f"}}],'
        '"tool_choice":"auto"}', 400,
     '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'),
    (P, '{"prompt":"a","allowed_token_ids":[]}', 400,
     "allowed_token_ids must name at least one token id."),
    (C, '{"messages":' + HI + ',"allowed_token_ids":[5,99999999]}', 400,
     "allowed_token_ids: token id 99999999 is out of vocabulary (size 49152)."),
    (C, '{"messages":' + HI + ',"priority":3}', 400,
     "Got priority 3 but Priority scheduling is not enabled (start the server with "
     "--scheduling-policy priority)."),
    (P, '{"prompt":"a","prompt_logprobs":1,"stream":true}', 400,
     "prompt_logprobs are not available when stream=true."),
    (C, '{"messages":' + HI + ',"prompt_logprobs":2,"stream":true}', 400,
     "prompt_logprobs are not available when stream=true."),
    (P, '{"prompt":"a","guided_json":{"type":"integer","minimum":5,"maximum":1}}', 400,
     "guided_json cannot be enforced: Unsatisfiable schema: minimum (5) is greater than maximum "
     "(1)."),
    (C, '{"model":"nope","messages":' + HI + '}', 404, "The model `nope` does not exist."),
    (P, '{"prompt":"a","n":"x","echo":1}', 400, TYPE_ERROR),
    (P, '{"prompt":"a","stream_options":5,"n":"x"}', 400, TYPE_ERROR),
    (P, '{"n":"x"}', 400, TYPE_ERROR),
    (P, '{"prompt":"a","suffix":"b"}', 400, None),
    (P, '{"prompt":[]}', 400, None),
    (P, '{"prompt":[1,"a"]}', 400, None),
    (P, '{"prompt":[[]]}', 400, None),
    (P, '{"prompt":[99999999]}', 400, None),
    (P, '{"prompt":5}', 400, None),
    (P, '{"prompt":"a","logprobs":21}', 400, None),
    (P, '{"prompt":' + str([5] * MAX_MODEL_LEN) + '}', 400, None),
    (P, '{"max_tokens":1}', 400, TYPE_ERROR),
    ("/tokenize", '{"prompt":"hi","messages":[]}', 400,
     "Exactly one of `prompt` or `messages` must be given."),
    ("/tokenize", "[1]", 400, NOT_OBJECT),
    ("/tokenize", '{"messages":' + HI + ',"chat_template_kwargs":[]}', 400, TYPE_ERROR),
    ("/tokenize", '{"messages":' + HI + ',"add_generation_prompt":"x","prompt":5}', 400,
     TYPE_ERROR),
    ("/detokenize", '{"tokens":[1,-1]}', 400, TYPE_ERROR),
    ("/detokenize", '{"tokens":[1,"x",-1]}', 400, TYPE_ERROR),
    ("/detokenize", "{}", 400, TYPE_ERROR),
    # Not a field of /detokenize (it was named, as serde's error was re-read as sampling
    # fields for any endpoint): the missing `tokens` is.
    ("/detokenize", '{"temperature":"x"}', 400,
     Foreign(DESERIALIZER, "Invalid request: missing field `tokens`")),
    ("/detokenize", '["m"]', 400, NOT_OBJECT),
    ("/detokenize", '{"tokens":[99999999]}', 400, None),
    ("/nope", "{}", 404, "Not Found"),
]


@pytest.mark.parametrize("case", CASES, ids=[f"{i}" for i in range(len(CASES))])
def test_error_table(servers: dict, case: tuple) -> None:
    assert_same_error(servers, *case)


def assert_same_error(servers: dict, path: str, raw: str | bytes, status: int,
                      message: str | Foreign | None) -> None:
    """Every frontend answers `raw` with the same error (see the table above)."""
    bodies = {}
    for mode, s in servers.items():
        r = s.post(path, raw=raw if isinstance(raw, bytes) else raw.encode())
        assert r.status_code == status, (mode, r.text)
        assert r.headers["content-type"] == "application/json", mode
        body = parsed(r)
        assert body.keys() == {"error"}, mode
        assert body["error"].keys() == {"message", "type", "param", "code"}, mode
        assert body["error"]["code"] == status, mode
        assert isinstance(body["error"]["message"], str) and body["error"]["message"], mode
        if isinstance(message, str):
            assert body["error"]["message"] == message, mode
        bodies[mode] = body["error"]
    rust = bodies.pop("rust")
    if isinstance(message, Foreign) and message.rust is not None:
        assert rust["message"] == message.rust
    for mode, error in bodies.items():
        if isinstance(message, Foreign):
            prefix = {PARSER: "Invalid JSON body: ", DESERIALIZER: "Invalid request: ",
                      TEMPLATE: "invalid chat template: "}[message.kind]
            assert rust["message"].startswith(prefix), rust
            assert error["message"].startswith(prefix), (mode, error)
            field = _named_field(rust) if message.kind == DESERIALIZER else None
            assert field is None or field in error["message"], (mode, field, error)
            error = {**error, "message": rust["message"]}
        assert_equal(error, rust, where=mode)


def test_the_engines_refusal_names_the_field(servers: dict) -> None:
    """A request the API lets through but the engine refuses (min_tokens beyond the max_tokens
    that fits in the context window, the API's bound being only max_tokens when it is unset):
    the engine names the field, and every frontend puts it in `param`."""
    raw = '{"prompt":"hi","min_tokens":1000}'
    assert_same_error(servers, P, raw, 400, "min_tokens must be in [0, max_tokens], got 1000.")
    for mode, s in servers.items():
        assert parsed(s.post(P, raw=raw.encode()))["error"]["param"] == "min_tokens", mode


def _named_field(error: dict) -> str | None:
    """The field a deserializer error names: its param, or the one `missing field` names."""
    if error["param"] is not None:
        return error["param"]
    m = re.search(r"missing field `([^`]+)`", error["message"])
    return m.group(1) if m else None


def test_accepted_like_rust(servers: dict) -> None:
    """Bodies serde takes although they look odd (a `+` sign on a token id, explicit nulls,
    126 arrays deep) get the same 200 everywhere."""
    ok = '{"messages":' + HI + ',"max_tokens":2,"temperature":0'
    for raw in (ok + ',"logit_bias":{"+5":1}}',
                ok + ',"n":null,"stop":null,"stream_options":null,"stream":null,"seed":null}',
                ok + ',"x":' + "[" * 126 + "]" * 126 + "}"):
        results = {}
        for mode, s in servers.items():
            r = s.post(C, raw=raw.encode())
            assert r.status_code == 200, (mode, raw[:80], r.text)
            results[mode] = (parse_sse(r.content) if r.headers["content-type"].startswith(
                "text/event-stream") else parsed(r))
        assert_same(results)


def test_body_too_large(servers: dict) -> None:
    big = b'{"prompt":"' + b"a" * (33 << 20) + b'"}'
    bodies = {}
    for mode, s in servers.items():
        r = s.post(P, raw=big)
        assert r.status_code == 413, mode
        assert r.headers["content-type"] == "application/json", mode
        bodies[mode] = parsed(r)
    assert_same(bodies, tol=0.0)
    assert bodies["rust"] == {"error": {
        "message": "Request body is larger than the limit of 33554432 bytes.",
        "type": "PayloadTooLargeError", "param": None, "code": 413}}


def test_wrong_method(servers: dict) -> None:
    for mode, s in servers.items():
        r = s.http.post("/v1/models")
        assert r.status_code == 405, mode
