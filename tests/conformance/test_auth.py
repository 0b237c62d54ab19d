"""Every registered route of each frontend (the tables the routers are built from, see
tests/reliability/routes.py) refuses a missing or wrong key (401), except
/health and /version; CORS preflight passes without one."""

from __future__ import annotations

import httpx
import pytest

from tests.conformance.conftest import API_KEY
from tests.reliability.routes import python_routes, rust_routes

# "/": the playground page (its calls need the key); "/load": polled by load balancers.
OPEN = {"/health", "/version", "/load", "/"}
UNAUTHORIZED = {"error": {"message": "Unauthorized: a valid API key is required "
                                     "(Authorization: Bearer <key>).",
                          "type": "AuthenticationError", "param": None, "code": 401}}


def test_route_tables_agree() -> None:
    assert python_routes() == rust_routes()


@pytest.mark.parametrize("kind", ["python", "rust"])
def test_every_route_needs_a_key(servers: dict, kind: str) -> None:
    routes = python_routes() if kind == "python" else rust_routes()
    modes = ["py-inproc", "py-grpc"] if kind == "python" else ["rust"]
    for mode in modes:
        url = servers[mode].url
        for method, path in sorted(routes):
            for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": API_KEY}):
                r = httpx.request(method, url + path, headers=headers, content=b"{}")
                if path in OPEN:
                    assert r.status_code in (200, 503), (mode, path)
                    continue
                assert r.status_code == 401, (mode, method, path, headers)
                assert r.headers["content-type"] == "application/json"
                assert r.json() == UNAUTHORIZED
                assert r.headers["www-authenticate"] == "Bearer"
        r = httpx.get(url + "/no/such/route")
        assert r.status_code == 401, mode  # unknown routes are not revealed without a key
        r = httpx.options(url + "/v1/models", headers={
            "Origin": "http://example.com", "Access-Control-Request-Method": "GET"})
        assert r.status_code == 200, mode
        assert r.headers["access-control-allow-origin"] == "*"
        ok = httpx.get(url + "/v1/models", headers={"Authorization": f"Bearer {API_KEY}"})
        assert ok.status_code == 200
