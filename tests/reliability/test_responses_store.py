"""The /v1/responses store in both frontends: a stored response is visible only to the API
key that created it, and the store keeps at most --responses-store-size responses (least
recently used dropped first)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.launch import Server, start, stop
from tests.reliability.conftest import KINDS, MOCK

KEY_A, KEY_B = "sk-owner-a", "sk-owner-b"


@pytest.fixture(scope="module", params=KINDS)
def two_keys(request: pytest.FixtureRequest, model_path: Path,
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = start(request.param, tmp_path_factory.mktemp(request.param), *MOCK,
                "--api-key", KEY_A, "--api-key", KEY_B, "--responses-store-size", "2")
    yield srv
    assert stop(srv) == 0


def _create(srv: Server, key: str) -> str:
    with srv.client(key) as c:
        r = c.post("/v1/responses", json={"input": "Hi", "max_output_tokens": 2})
        assert r.status_code == 200, r.text
        return r.json()["id"]


def test_only_the_creating_key_sees_a_response(two_keys: Server) -> None:
    rid = _create(two_keys, KEY_A)
    with two_keys.client(KEY_B) as b, two_keys.client(KEY_A) as a:
        for method, path in (("GET", f"/v1/responses/{rid}"),
                             ("GET", f"/v1/responses/{rid}/input_items"),
                             ("DELETE", f"/v1/responses/{rid}")):
            r = b.request(method, path)
            assert r.status_code == 404, (method, path, r.text)
            assert r.json()["error"]["message"] == f"Response with id '{rid}' not found."
        cont = b.post("/v1/responses", json={"input": "x", "previous_response_id": rid,
                                             "max_output_tokens": 1})
        assert cont.status_code == 404
        assert a.get(f"/v1/responses/{rid}").json()["id"] == rid
        assert a.post("/v1/responses", json={"input": "x", "previous_response_id": rid,
                                             "max_output_tokens": 1}).status_code == 200
        assert a.delete(f"/v1/responses/{rid}").json() == {
            "id": rid, "object": "response", "deleted": True}


def test_store_is_bounded_lru(two_keys: Server) -> None:
    first, second = _create(two_keys, KEY_A), _create(two_keys, KEY_A)
    with two_keys.client(KEY_A) as a:
        assert a.get(f"/v1/responses/{first}").status_code == 200  # first is now recent
        third = _create(two_keys, KEY_A)  # evicts second
        assert a.get(f"/v1/responses/{second}").status_code == 404
        assert a.get(f"/v1/responses/{first}").status_code == 200
        assert a.get(f"/v1/responses/{third}").status_code == 200
