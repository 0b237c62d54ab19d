"""HTTPS with --ssl-keyfile/--ssl-certfile (rustls in the Rust frontend, uvicorn's ssl in the
Python one), spoken by the openai client; CORS preflight with --allowed-origins in both."""

from __future__ import annotations

import ssl
import subprocess
from pathlib import Path

import httpx
import openai
import pytest

from tests.launch import start, stop
from tests.reliability.conftest import API_KEY, KINDS, MOCK


def self_signed(tmp: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1, valid for a day, and its key (openssl CLI)."""
    cert, key = tmp / "cert.pem", tmp / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    return cert, key


@pytest.mark.parametrize("kind", KINDS)
def test_https_with_the_openai_client(kind: str, model_path: Path, tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path)
    trust = ssl.create_default_context(cafile=str(cert))
    srv = start(kind, tmp_path, *MOCK, "--api-key", API_KEY, "--ssl-certfile", str(cert),
                "--ssl-keyfile", str(key), scheme="https", verify=trust)
    try:
        assert srv.url.startswith("https://")
        with httpx.Client(verify=trust) as http:
            client = openai.OpenAI(base_url=srv.url + "/v1", api_key=API_KEY, max_retries=0,
                                   http_client=http)
            model = client.models.list().data[0].id
            c = client.completions.create(model=model, prompt="Hello", max_tokens=5)
            assert c.usage.completion_tokens == 5
            chunks = list(client.chat.completions.create(
                model=model, messages=[{"role": "user", "content": "Hi"}], max_tokens=4,
                stream=True, stream_options={"include_usage": True}))
            assert chunks[-1].usage.completion_tokens == 4
        # Plain HTTP on the TLS port is not served, and an unknown certificate is refused.
        with pytest.raises(httpx.HTTPError):
            httpx.get(srv.url.replace("https", "http") + "/health", timeout=5)
        with pytest.raises(httpx.ConnectError):
            httpx.get(srv.url + "/health", timeout=5)  # system trust store: not ours
    finally:
        assert stop(srv) == 0


def test_tls_needs_both_files(model_path: Path, tmp_path: Path) -> None:
    cert, _ = self_signed(tmp_path)
    for kind in KINDS:
        with pytest.raises(RuntimeError, match="--ssl-certfile and --ssl-keyfile go together"):
            start(kind, tmp_path, *MOCK, "--ssl-certfile", str(cert))


@pytest.mark.parametrize("kind", KINDS)
def test_cors_preflight_honours_allowed_origins(kind: str, model_path: Path,
                                                tmp_path: Path) -> None:
    ok = "https://app.example"
    srv = start(kind, tmp_path, *MOCK, "--api-key", API_KEY, "--allowed-origins",
                f'["{ok}"]', "--allowed-methods", "GET,POST",
                "--allowed-headers", "authorization")
    try:
        def preflight(origin: str, method: str = "POST", **extra: str) -> httpx.Response:
            return httpx.options(srv.url + "/v1/chat/completions", headers={
                "Origin": origin, "Access-Control-Request-Method": method, **extra})

        # No key needed for a preflight; the allowed origin is echoed back.
        r = preflight(ok, **{"Access-Control-Request-Headers": "Authorization, Content-Type"})
        assert r.status_code == 200
        assert r.headers["access-control-allow-origin"] == ok
        assert "POST" in r.headers["access-control-allow-methods"]
        # What the policy does not allow is refused, naming what failed (as vLLM does).
        for (origin, method, extra), failed in [
                (("https://evil.example", "POST", {}), "origin"),
                ((ok, "DELETE", {}), "method"),
                ((ok, "POST", {"Access-Control-Request-Headers": "x-secret"}), "headers"),
                (("https://evil.example", "PUT", {}), "origin, method")]:
            r = preflight(origin, method, **extra)
            assert (r.status_code, r.text) == (400, f"Disallowed CORS {failed}"), origin
            if "origin" in failed:
                assert "access-control-allow-origin" not in r.headers
        # Actual requests: the allowed origin is named, another is not (the browser blocks it).
        auth = {"Authorization": f"Bearer {API_KEY}"}
        r = httpx.get(srv.url + "/v1/models", headers={**auth, "Origin": ok})
        assert r.status_code == 200 and r.headers["access-control-allow-origin"] == ok
        r = httpx.get(srv.url + "/v1/models", headers={**auth, "Origin": "https://evil.example"})
        assert r.status_code == 200 and "access-control-allow-origin" not in r.headers
    finally:
        assert stop(srv) == 0
