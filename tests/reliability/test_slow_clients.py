"""Slow clients in the Rust frontend (mock engine): 200 slowloris connections, each sending
one header byte a second, do not stop a normal client from being served, and each is closed
once --header-read-timeout has passed; a keep-alive connection idle that long is closed too."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.launch import Server, start, stop
from tests.reliability.conftest import API_KEY, MOCK

SLOW = 200
TIMEOUT_S = 2.0
AUTH = {"Authorization": f"Bearer {API_KEY}"}


@pytest.fixture(scope="module")
def rust(model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = start("rust", tmp_path_factory.mktemp("rust"), *MOCK, "--api-key", API_KEY,
                "--header-read-timeout", str(TIMEOUT_S))
    yield srv
    assert stop(srv) == 0


async def _slowloris(port: int) -> float:
    """Sends a request head a byte a second; the seconds until the server closed on it."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    t0 = time.monotonic()
    head = b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 100
    for byte in head:
        try:
            writer.write(bytes([byte]))
            await writer.drain()
        except ConnectionError:
            break
        try:  # a byte a second, unless the server closes first
            if await asyncio.wait_for(reader.read(1024), 1.0) == b"":
                break
        except asyncio.TimeoutError:
            continue
        except ConnectionError:
            break
    writer.close()
    return time.monotonic() - t0


async def _normal_client(url: str) -> list[float]:
    """While the slowloris runs: requests answered, and how long each took."""
    await asyncio.sleep(0.5)
    took = []
    async with httpx.AsyncClient(base_url=url, headers=AUTH, timeout=10) as client:
        for _ in range(3):
            t0 = time.monotonic()
            r = await client.post("/v1/completions", json={
                "prompt": "Hi", "max_tokens": 4, "ignore_eos": True})
            assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 4
            took.append(time.monotonic() - t0)
    return took


async def _attack(srv: Server) -> tuple[list[float], list[float]]:
    port = int(srv.url.rsplit(":", 1)[1])
    slow = [asyncio.create_task(_slowloris(port)) for _ in range(SLOW)]
    took = await _normal_client(srv.url)
    return took, list(await asyncio.gather(*slow))


def test_slowloris_is_closed_and_others_are_served(rust: Server) -> None:
    took, closed = asyncio.run(_attack(rust))
    print(f"\nslowloris ({SLOW} connections, a byte a second, --header-read-timeout "
          f"{TIMEOUT_S}): normal requests took {max(took):.3f} s at most; the slow "
          f"connections were closed after {min(closed):.2f}-{max(closed):.2f} s")
    assert max(took) < 2.0
    # Each closed by the server at the timeout (the head would take 130 s).
    assert all(TIMEOUT_S - 0.5 < c < TIMEOUT_S + 1.5 for c in closed), closed


def test_idle_keep_alive_is_closed(rust: Server) -> None:
    async def idle() -> float:
        reader, writer = await asyncio.open_connection("127.0.0.1",
                                                       int(rust.url.rsplit(":", 1)[1]))
        writer.write(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        await writer.drain()
        head = await reader.readuntil(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200") and b"connection: close" not in head.lower()
        t0 = time.monotonic()
        assert await asyncio.wait_for(reader.read(1024), TIMEOUT_S + 3) == b""
        writer.close()
        return time.monotonic() - t0

    closed = asyncio.run(idle())
    print(f"\nan idle keep-alive connection was closed after {closed:.2f} s")
    assert TIMEOUT_S - 0.5 < closed < TIMEOUT_S + 1.5
