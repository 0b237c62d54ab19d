"""Limits added for issue #18, alike in every frontend: /v1/completions without max_tokens
generates 16 tokens, a non-JSON content type is 415, too many header fields 431
(tests/reliability/test_limits.py checks them in depth)."""

from __future__ import annotations

from tests.conformance.conftest import assert_same, parsed


def test_completions_default_to_16_tokens(servers: dict) -> None:
    results = {}
    for mode, s in servers.items():
        r = s.post("/v1/completions", {"prompt": "Once upon a time", "temperature": 0})
        assert r.status_code == 200, (mode, r.text)
        results[mode] = parsed(r)
        assert results[mode]["usage"]["completion_tokens"] == 16, mode
        assert results[mode]["choices"][0]["finish_reason"] == "length", mode
    assert_same(results)


def test_content_type_and_header_limits(servers: dict) -> None:
    results = {}
    for mode, s in servers.items():
        r = s.post("/v1/chat/completions", {"messages": []},
                   headers={"content-type": "text/plain"})
        many = {f"x-field-{i}": "v" for i in range(120)}
        h = s.http.get("/v1/models", headers=many)
        results[mode] = [r.status_code, parsed(r), h.status_code, parsed(h)["error"]["type"]]
        assert results[mode][0] == 415 and results[mode][2] == 431, mode
    assert_same(results)
