"""API keys: every route of the table each router is built from refuses a missing or wrong
key (so a new route cannot be left open), keys come from repeated --api-key and
HYBRIDLLM_API_KEY, and no key reaches a child's command line, the worker or a log."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.launch import Server, process_tree, start, stop
from tests.reliability.conftest import API_KEY, KINDS, MOCK
from tests.reliability.routes import routes

OPEN = {"/health", "/version", "/load", "/"}
UNAUTHORIZED = {"error": {"message": "Unauthorized: a valid API key is required "
                                     "(Authorization: Bearer <key>).",
                          "type": "AuthenticationError", "param": None, "code": 401}}
BAD_HEADERS = [{}, {"Authorization": "Bearer wrong"}, {"Authorization": API_KEY},
               {"Authorization": f"Bearer {API_KEY}x"}, {"Authorization": f"Basic {API_KEY}"},
               {"Authorization": "Bearer"}]


def test_route_tables_agree() -> None:
    assert routes("rust") == routes("python")
    assert {p for _, p in routes("rust")} >= OPEN | {"/v1/chat/completions", "/metrics"}


def test_every_route_refuses_a_missing_key(server: Server) -> None:
    table = routes(server.kind)
    for method, path in sorted(table):
        for headers in BAD_HEADERS:
            r = httpx.request(method, server.url + path, headers=headers, content=b"{}")
            if path in OPEN:
                assert r.status_code == 200, (method, path, r.text)
                continue
            assert r.status_code == 401, (method, path, headers, r.status_code)
            assert r.headers["content-type"] == "application/json"
            assert r.json() == UNAUTHORIZED
            assert r.headers["www-authenticate"] == "Bearer"
        ok = httpx.request(method, server.url + path, content=b"{}",
                           headers={"Authorization": f"Bearer {API_KEY}"})
        assert ok.status_code != 401, (method, path)
    # Unknown routes are not revealed without a key.
    assert httpx.get(server.url + "/no/such/route").status_code == 401
    print(f"\n{server.kind}: {len(table)} routes, {len(table) - len(OPEN)} refuse without a key")


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


@pytest.mark.parametrize("kind", KINDS)
def test_keys_from_flags_and_environment_stay_secret(kind: str, model_path: Path,
                                                     tmp_path: Path) -> None:
    env_keys, flag_keys = ["sk-env-one", "sk-env-two"], ["sk-flag-one", "sk-flag-two"]
    srv = start(kind, tmp_path, *MOCK, "--api-key", flag_keys[0], "--api-key", flag_keys[1],
                "--metrics-no-auth",
                env={"HYBRIDLLM_API_KEY": " , ".join(env_keys), "HYBRIDLLM_LOG": "debug"})
    try:
        for key in env_keys + flag_keys:
            r = httpx.get(srv.url + "/v1/models", headers={"Authorization": f"Bearer {key}"})
            assert r.status_code == 200, key
        whole = " , ".join(env_keys)
        assert httpx.get(srv.url + "/v1/models",
                         headers={"Authorization": f"Bearer {whole}"}).status_code == 401
        assert httpx.get(srv.url + "/v1/models").status_code == 401
        assert httpx.get(srv.url + "/metrics").status_code == 200  # --metrics-no-auth
        httpx.post(srv.url + "/v1/completions", json={"prompt": "hi", "max_tokens": 2},
                   headers={"Authorization": f"Bearer {env_keys[0]}"}).raise_for_status()
        children = process_tree(srv.proc.pid)[1:]
        if kind == "rust":  # the worker and the frontend
            assert len(children) == 2, children
        for pid in children:
            cmdline = _read(f"/proc/{pid}/cmdline")
            for key in env_keys + flag_keys:
                assert key.encode() not in cmdline, (pid, cmdline)
            if b"worker" in cmdline:  # the worker needs no key, not even in its environment
                environ = _read(f"/proc/{pid}/environ")
                assert not any(k.encode() in environ for k in env_keys + flag_keys)
    finally:
        assert stop(srv) == 0
    log = srv.output()
    assert log, "the server wrote no log at all"
    for key in env_keys + flag_keys:
        assert key not in log


def test_metrics_protected_by_default(server: Server) -> None:
    assert httpx.get(server.url + "/metrics").status_code == 401
    r = httpx.get(server.url + "/metrics", headers={"Authorization": f"Bearer {API_KEY}"})
    assert r.status_code == 200 and "hybridllm:" in r.text
