"""Request ids as vLLM reads them, in every frontend: an `X-Request-Id` header, else the body's
`request_id`, names the response (`chatcmpl-<id>`, `cmpl-<id>`); the engine's own id stays
unique, so two requests with one id both run; `--enable-request-id-headers` puts
`X-Request-Id` on every answer (the request's, or a new one that then names the response)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.conformance.conftest import API_KEY, ENGINE_FLAGS, MODEL, parse_sse
from tests.launch import Server, both_frontends

CHAT = {"messages": [{"role": "user", "content": "Name a colour."}], "max_tokens": 4,
        "temperature": 0, "ignore_eos": True}
COMPLETION = {"prompt": "Colours: red,", "max_tokens": 4, "temperature": 0, "ignore_eos": True}


def test_the_header_or_the_body_names_the_response(servers: dict) -> None:
    for mode, s in servers.items():
        r = s.post("/v1/chat/completions", CHAT, headers={"X-Request-Id": "trace-42"})
        assert r.status_code == 200 and r.json()["id"] == "chatcmpl-trace-42", (mode, r.text)
        assert "x-request-id" not in r.headers, mode  # only with --enable-request-id-headers
        r = s.post("/v1/completions", {**COMPLETION, "request_id": "from-body"})
        assert r.json()["id"] == "cmpl-from-body", (mode, r.text)
        r = s.post("/v1/chat/completions", {**CHAT, "request_id": "from-body"},
                   headers={"X-Request-Id": "from-header"})
        assert r.json()["id"] == "chatcmpl-from-header", mode
        chunks = parse_sse(s.post("/v1/completions", {**COMPLETION, "stream": True},
                                  headers={"X-Request-Id": "s-1"}).content)
        assert {c["id"] for c in chunks} == {"cmpl-s-1"}, mode
        # Without either, the server's own id.
        assert re.fullmatch(r"chatcmpl-[0-9a-f]{32}",
                            s.post("/v1/chat/completions", CHAT).json()["id"]), mode


def test_one_id_twice_at_once(servers: dict) -> None:
    """Ids chosen by callers need not be unique: both requests run to their end."""
    body = {**COMPLETION, "max_tokens": 24, "stream": True}
    for mode, s in servers.items():
        with ThreadPoolExecutor(2) as pool:
            done = list(pool.map(lambda srv: parse_sse(srv.post(
                "/v1/completions", body, headers={"X-Request-Id": "same"}).content), [s, s]))
        for chunks in done:
            assert chunks[-1]["choices"][0]["finish_reason"] == "length", (mode, chunks[-1])
            text = "".join(c["choices"][0]["text"] for c in chunks)
            assert {c["id"] for c in chunks} == {"cmpl-same"}, mode
        assert text == "".join(c["choices"][0]["text"] for c in done[0]), mode


@pytest.mark.parametrize(("where", "param"), [("header", "X-Request-Id"),
                                              ("body", "request_id")])
def test_a_long_id_is_refused(servers: dict, where: str, param: str) -> None:
    rid = "x" * 513
    for mode, s in servers.items():
        r = (s.post("/v1/chat/completions", CHAT, headers={"X-Request-Id": rid})
             if where == "header" else s.post("/v1/chat/completions", {**CHAT, "request_id": rid}))
        assert r.status_code == 400 and r.json()["error"] == {
            "message": f"{param} must be 1 to 512 bytes long, got 513.",
            "type": "BadRequestError", "param": param, "code": 400}, (mode, r.text)


@pytest.fixture(scope="module")
def with_headers(tmp_path_factory: pytest.TempPathFactory, model_path: Path
                 ) -> Iterator[dict[str, Server]]:
    yield from both_frontends(lambda kind: tmp_path_factory.mktemp(f"rid-{kind}"), MODEL,
                              *ENGINE_FLAGS, "--api-key", API_KEY, "--enable-request-id-headers")


def test_enable_request_id_headers(with_headers: dict[str, Server]) -> None:
    for kind, s in with_headers.items():
        r = s.post("/v1/chat/completions", CHAT, headers={"X-Request-Id": "abc"})
        assert r.headers["x-request-id"] == "abc" and r.json()["id"] == "chatcmpl-abc", kind
        r = s.post("/v1/completions", COMPLETION)
        made = r.headers["x-request-id"]
        assert re.fullmatch(r"[0-9a-f]{32}", made) and r.json()["id"] == f"cmpl-{made}", kind
        # Refusals and other endpoints carry it too.
        r = s.http.get("/v1/models", headers={"Authorization": "Bearer wrong",
                                              "X-Request-Id": "denied"})
        assert r.status_code == 401 and r.headers["x-request-id"] == "denied", kind
        r = s.http.get("/health")
        assert re.fullmatch(r"[0-9a-f]{32}", r.headers["x-request-id"]), kind
