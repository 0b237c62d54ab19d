"""The error table: same status, same body byte for byte, in every frontend."""

from __future__ import annotations

import json

import pytest

from tests.conformance.conftest import MAX_MODEL_LEN, normalise_bytes

HI = '[{"role":"user","content":"hi"}]'
C = "/v1/chat/completions"
P = "/v1/completions"

# (path, raw body, status, expected message or None to only compare across frontends)
CASES: list[tuple[str, str, int, str | None]] = [
    (C, "{bad", 400, "Invalid JSON body: key must be a string at line 1 column 2"),
    (C, "", 400, "Invalid JSON body: EOF while parsing a value at line 1 column 0"),
    (C, '{"messages":[1,2,]}', 400, "Invalid JSON body: trailing comma at line 1 column 18"),
    (C, '{"messages":' + HI + '} x', 400, None),
    (C, '{"messages":' + HI + ',"temperature":1e400}', 400, None),
    (C, '{"messages":' + HI + ',\n "temperature": "x"\n}', 400,
     'Invalid request: temperature: invalid type: string "x", expected f64'),
    (C, '{"messages":' + HI + ',"n":1.5}', 400, None),
    (C, '{"messages":"x"}', 400, None),
    (C, '{"model":5,"messages":[]}', 400, None),
    (C, "{}", 400, "Invalid request: missing field `messages`"),
    (C, "[1]", 400, None),
    (C, "null", 400, None),
    (C, '{"messages":' + HI + ',"stream_options":{"include_usage":1}}', 400, None),
    (C, '{"messages":' + HI + ',"stop_token_ids":[-1]}', 400, None),
    (C, '{"messages":' + HI + ',"messages":[]}', 400, None),
    (C, '{"messages":' + HI + ',"seed":1e3}', 400, None),
    (C, '{"messages":' + HI + ',"top_k":"a\\nb"}', 400, None),
    (C, '{"messages":' + HI + ',"temperature":3}', 400, "temperature must be in [0, 2], got 3."),
    (C, '{"messages":' + HI + ',"temperature":2.5}', 400, None),
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
    (C, '{"messages":' + HI + ',"logprobs":true,"top_logprobs":21}', 400, None),
    (C, '{"messages":' + HI + ',"top_logprobs":2}', 400, None),
    (C, '{"messages":' + HI + ',"prompt_logprobs":-1}', 400, None),
    (C, '{"messages":' + HI + ',"logit_bias":{"x":1}}', 400, None),
    (C, '{"messages":' + HI + ',"logit_bias":{"99999999":1}}', 400, None),
    (C, '{"messages":' + HI + ',"logit_bias":{"5":101}}', 400, None),
    (C, '{"messages":' + HI + ',"stop_token_ids":[99999999]}', 400, None),
    (C, '{"messages":' + HI + ',"stop":5}', 400, None),
    (C, '{"messages":[]}', 400, None),
    (C, '{"messages":[5]}', 400, None),
    (C, '{"messages":[{"content":"x"}]}', 400, None),
    (C, '{"messages":[{"role":"user","content":[{"type":"image_url"}]}]}', 400, None),
    (C, '{"messages":' + HI + ',"chat_template":"{% if %}"}', 400, "invalid chat template: *"),
    (C, '{"messages":' + HI + ',"chat_template":"{{ raise_exception(\'nope\') }}"}', 400,
     "nope"),
    (C, '{"messages":' + HI + ',"continue_final_message":true,"add_generation_prompt":true}',
     400, None),
    (C, '{"messages":' + HI + ',"max_tokens":600}', 400,
     f"This model's maximum context length is {MAX_MODEL_LEN} tokens. However, you requested "
     f"631 tokens (31 in the messages, 600 in the completion). Please reduce the length of the "
     "messages or completion."),
    (C, '{"model":"nope","messages":' + HI + '}', 404, "The model `nope` does not exist."),
    (P, '{"prompt":"a","n":"x","echo":1}', 400, None),
    (P, '{"prompt":"a","suffix":"b"}', 400, None),
    (P, '{"prompt":"a","echo":true,"logprobs":1}', 400, None),
    (P, '{"prompt":[]}', 400, None),
    (P, '{"prompt":[1,"a"]}', 400, None),
    (P, '{"prompt":[[]]}', 400, None),
    (P, '{"prompt":[99999999]}', 400, None),
    (P, '{"prompt":5}', 400, None),
    (P, '{"prompt":"a","logprobs":21}', 400, None),
    (P, '{"prompt":' + str([5] * MAX_MODEL_LEN) + '}', 400, None),
    (P, '{"max_tokens":1}', 400, None),
    ("/tokenize", '{"prompt":"hi","messages":[]}', 400,
     "Exactly one of `prompt` or `messages` must be given."),
    ("/detokenize", '{"tokens":[1,-1]}', 400, None),
    ("/detokenize", '{"tokens":[99999999]}', 400, None),
    ("/nope", "{}", 404, "Not Found"),
]


@pytest.mark.parametrize("case", CASES, ids=[f"{i}" for i in range(len(CASES))])
def test_error_table(servers: dict, case: tuple[str, str, int, str | None]) -> None:
    path, raw, status, message = case
    bodies = {}
    for mode, s in servers.items():
        r = s.post(path, raw=raw.encode())
        assert r.status_code == status, (mode, r.text)
        assert r.headers["content-type"] == "application/json", mode
        body = r.json()
        assert list(body["error"]) == ["message", "type", "param", "code"]
        assert body["error"]["code"] == status
        if message is not None and message.endswith("*"):
            # The template engines' own syntax messages (minijinja vs Jinja2) differ.
            assert body["error"]["message"].startswith(message[:-1]), mode
            body["error"]["message"] = message
            bodies[mode] = json.dumps(body).encode()
            continue
        if message is not None:
            assert body["error"]["message"] == message, mode
        bodies[mode] = normalise_bytes(r.content)
    assert bodies["py-inproc"] == bodies["rust"], bodies
    assert bodies["py-grpc"] == bodies["rust"], bodies


def test_body_too_large(servers: dict) -> None:
    big = b'{"prompt":"' + b"a" * (33 << 20) + b'"}'
    bodies = {}
    for mode, s in servers.items():
        r = s.post(P, raw=big)
        assert r.status_code == 413, mode
        bodies[mode] = r.content
    assert len(set(bodies.values())) == 1, bodies
    assert b"Request body is larger than the limit of 33554432 bytes." in bodies["rust"]


def test_wrong_method(servers: dict) -> None:
    for mode, s in servers.items():
        r = s.http.post("/v1/models")
        assert r.status_code == 405, mode
