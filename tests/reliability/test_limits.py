"""Limits that answer with a clear 4xx in both frontends and leave the server serving: the
16-token default of /v1/completions, --max-tokens-limit, body size (413), header fields
(431), JSON nesting, invalid UTF-8, content type (415), a prompt over the context."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from tests.launch import Server, start, stop
from tests.reliability.conftest import API_KEY, KINDS, MOCK

CAP = 24  # --max-tokens-limit
BODY_LIMIT = 1_000_000  # --max-request-body-bytes; 100k-deep JSON (200-500 kB) fits
AUTH = {"Authorization": f"Bearer {API_KEY}"}


@pytest.fixture(scope="module", params=KINDS)
def limited(request: pytest.FixtureRequest, model_path: Path,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = start(request.param, tmp_path_factory.mktemp(request.param), *MOCK,
                "--api-key", API_KEY, "--max-tokens-limit", str(CAP),
                "--max-request-body-bytes", str(BODY_LIMIT))
    yield srv
    assert stop(srv) == 0


def error(status: int, message: str, param: str | None = None) -> dict:
    types = {400: "BadRequestError", 413: "PayloadTooLargeError",
             415: "UnsupportedMediaTypeError", 431: "RequestHeaderFieldsTooLargeError"}
    return {"error": {"message": message, "type": types[status], "param": param,
                      "code": status}}


def assert_serving(srv: Server) -> None:
    """Healthy, and a normal request is answered in full."""
    assert httpx.get(srv.url + "/health").status_code == 200
    r = httpx.post(srv.url + "/v1/completions", headers=AUTH,
                   json={"prompt": "Hello there", "max_tokens": 3})
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 3


def test_completions_default_to_16_tokens(limited: Server) -> None:
    client = openai.OpenAI(base_url=limited.url + "/v1", api_key=API_KEY, max_retries=0)
    model = client.models.list().data[0].id
    c = client.completions.create(model=model, prompt="Once upon a time")
    assert c.usage.completion_tokens == 16 and c.choices[0].finish_reason == "length"
    chunks = list(client.completions.create(model=model, prompt="Once upon a time",
                                            stream=True,
                                            stream_options={"include_usage": True}))
    assert chunks[-1].usage.completion_tokens == 16


def test_max_tokens_limit_clamps_unset_and_refuses_more(limited: Server) -> None:
    client = openai.OpenAI(base_url=limited.url + "/v1", api_key=API_KEY, max_retries=0)
    model = client.models.list().data[0].id
    messages = [{"role": "user", "content": "Tell me a long story."}]
    # Chat without a limit runs to the context, as vLLM does: here, to the operator's cap.
    c = client.chat.completions.create(model=model, messages=messages)
    assert c.usage.completion_tokens == CAP and c.choices[0].finish_reason == "length"
    c = client.chat.completions.create(model=model, messages=messages, max_tokens=CAP)
    assert c.usage.completion_tokens == CAP
    for path, field in (("/v1/chat/completions", "max_tokens"),
                        ("/v1/chat/completions", "max_completion_tokens"),
                        ("/v1/completions", "max_tokens")):
        body = {"messages": messages} if "chat" in path else {"prompt": "Hi"}
        r = httpx.post(limited.url + path, headers=AUTH, json={**body, field: CAP + 1})
        assert r.status_code == 400, (path, field)
        assert r.json() == error(400, f"{field} must be at most {CAP} (the server's "
                                      f"--max-tokens-limit), got {CAP + 1}.", field)
    assert_serving(limited)


def test_body_over_the_limit_is_413(limited: Server) -> None:
    too_large = error(413, f"Request body is larger than the limit of {BODY_LIMIT} bytes.")
    body = b'{"prompt": "' + b"a" * BODY_LIMIT + b'"}'
    r = httpx.post(limited.url + "/v1/completions", headers=AUTH, content=body)
    assert (r.status_code, r.json()) == (413, too_large)

    def chunked() -> Iterator[bytes]:  # no content-length: counted as it arrives
        yield b'{"prompt": "'
        for _ in range(BODY_LIMIT // 10_000 + 1):
            yield b"a" * 10_000
        yield b'"}'

    r = httpx.post(limited.url + "/v1/completions", headers=AUTH, content=chunked())
    assert (r.status_code, r.json()) == (413, too_large)
    assert_serving(limited)


def _raw_request(srv: Server, headers: list[tuple[str, str]]) -> tuple[int, bytes]:
    """A GET with exactly these header lines (after Host), on a fresh connection."""
    host, port = srv.url.split("//")[1].split(":")
    lines = "".join(f"{k}: {v}\r\n" for k, v in headers)
    with socket.create_connection((host, int(port)), timeout=30) as s:
        s.sendall(f"GET /v1/models HTTP/1.1\r\nHost: x\r\n{lines}Connection: close\r\n\r\n"
                  .encode())
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), body


def test_header_fields_over_the_limit_are_431(limited: Server) -> None:
    auth = [("Authorization", f"Bearer {API_KEY}")]
    # Host + Authorization + Connection + 98 = 101 fields.
    many = auth + [(f"X-Field-{i}", "v") for i in range(98)]
    status, body = _raw_request(limited, many)
    n_bytes = sum(len(k) + len(v) for k, v in [("host", "x"), ("connection", "close"), *many])
    assert status == 431
    assert httpx.Response(431, content=body).json() == error(
        431, f"Request header fields too large: 101 fields, {n_bytes} bytes (the limit is 100 "
             "fields and 32768 bytes).")
    status, _ = _raw_request(limited, auth + [(f"X-Field-{i}", "v") for i in range(97)])
    assert status == 200  # exactly 100 fields
    big = auth + [("X-Big", "a" * (40 << 10))]
    status, body = _raw_request(limited, big)
    n_bytes = sum(len(k) + len(v) for k, v in [("host", "x"), ("connection", "close"), *big])
    assert status == 431
    assert httpx.Response(431, content=body).json() == error(
        431, f"Request header fields too large: 4 fields, {n_bytes} bytes (the limit is 100 "
             "fields and 32768 bytes).")
    assert_serving(limited)


def test_100k_deep_json_is_400_without_overflow(limited: Server) -> None:
    depth = 100_000
    for body in (b"[" * depth + b"]" * depth,
                 b'{"prompt": ' + b"[" * depth + b"]" * depth + b"}",
                 b'{"messages": [{"role": "user", "content": ' + b'{"a":' * depth
                 + b"1" + b"}" * depth + b"}]}"):
        for path in ("/v1/completions", "/v1/chat/completions"):
            r = httpx.post(limited.url + path, headers=AUTH, content=body)
            assert r.status_code == 400, (path, r.text[:200])
            e = r.json()["error"]
            assert e["type"] == "BadRequestError" and e["code"] == 400
            assert e["message"].startswith("Invalid JSON body: "), e
    assert_serving(limited)


def test_invalid_utf8_is_400(limited: Server) -> None:
    for body in (b'{"prompt": "\xff\xfe", "max_tokens": 2}',
                 b'{"prompt": "ok", "max_tokens": 2, "\xc3": 1}'):
        r = httpx.post(limited.url + "/v1/completions", headers=AUTH, content=body)
        assert r.status_code == 400
        e = r.json()["error"]
        assert (e["type"], e["param"], e["code"]) == ("BadRequestError", None, 400)
        assert e["message"].startswith("Invalid JSON body: "), e
    assert_serving(limited)


def test_wrong_content_type_is_415(limited: Server) -> None:
    body = b'{"prompt": "Hi", "max_tokens": 2}'
    for ctype in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data"):
        for path in ("/v1/completions", "/v1/chat/completions", "/tokenize", "/detokenize"):
            r = httpx.post(limited.url + path, content=body,
                           headers={**AUTH, "content-type": ctype})
            assert (r.status_code, r.json()) == (415, error(
                415, "Unsupported Media Type: the request body must be application/json, "
                     f"got '{ctype}'.")), (path, ctype)
    for ctype in ("application/json; charset=utf-8", "APPLICATION/JSON", None):
        headers = {**AUTH, **({"content-type": ctype} if ctype else {})}
        r = httpx.post(limited.url + "/v1/completions", content=body, headers=headers)
        assert r.status_code == 200, ctype


def test_prompt_over_the_context_names_both_numbers(limited: Server) -> None:
    # "hi" repeated: one token each, after none (completions add no special tokens here).
    r = httpx.post(limited.url + "/v1/completions", headers=AUTH,
                   json={"prompt": "hi" + " hi" * 599, "max_tokens": 2})
    assert (r.status_code, r.json()) == (400, error(
        400, "This model's maximum context length is 512 tokens. However, you requested 602 "
             "tokens (600 in the messages, 2 in the completion). Please reduce the length of "
             "the messages or completion."))
    r = httpx.post(limited.url + "/v1/completions", headers=AUTH,
                   json={"prompt": "hi" + " hi" * 599})
    assert (r.status_code, r.json()) == (400, error(
        400, "This model's maximum context length is 512 tokens. However, you requested 600 "
             "tokens in the messages, Please reduce the length of the messages."))
    assert_serving(limited)


def test_unknown_fields_are_ignored_and_logged_once(limited: Server) -> None:
    """As vLLM: a field no request type knows is ignored (200) and logged, once per name."""
    body = {"messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 2, "zz_unknown_field": {"x": 1}}
    for _ in range(3):
        r = httpx.post(limited.url + "/v1/chat/completions", json=body, headers=AUTH)
        assert r.status_code == 200, r.text
    message = 'request field "zz_unknown_field" is not known to this server and was ignored'
    deadline = time.monotonic() + 5
    while limited.output().count(message) == 0 and time.monotonic() < deadline:
        time.sleep(0.1)  # the log is written by another process
    assert limited.output().count(message) == 1, limited.output()[-2000:]
