"""The disconnect storm (mock engine): 200 chat and completion streams whose clients hang up at
random points, some before the first token. Within 1 s of the last hang-up (plus the step in
flight) the worker runs nothing and holds no KV block; a fresh request is then served."""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.launch import Server, start, stop
from tests.reliability.conftest import API_KEY, KINDS

STREAMS = 200
STEP_MS = 20
MAX_TOKENS = 400  # 8 s of steps at the least: no stream ends by itself before its hang-up
AUTH = {"Authorization": f"Bearer {API_KEY}"}


@pytest.fixture(scope="module", params=KINDS)
def storm_server(request: pytest.FixtureRequest, model_path: Path,
                 tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = start(request.param, tmp_path_factory.mktemp(request.param), "--mock-engine",
                "--mock-step-ms", str(STEP_MS), "--max-model-len", "512",
                "--api-key", API_KEY)
    yield srv
    assert stop(srv) == 0


def _gauges(srv: Server) -> tuple[float, float]:
    text = httpx.get(srv.url + "/metrics", headers=AUTH, timeout=5).text
    values = {}
    for line in text.splitlines():
        for name in ("num_requests_running", "kv_cache_usage_perc"):
            if line.startswith(f"hybridllm:{name}"):
                values[name] = values.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
    return values["num_requests_running"], values["kv_cache_usage_perc"]


async def _abandon(port: int, i: int, events: int, delay: float) -> None:
    """Send one streaming request over a raw socket, read `events` SSE events (0: none, the
    hang-up comes before the first token), wait `delay` s, then close the connection."""
    if i % 2:
        path, body = "/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}]}
    else:
        path, body = "/v1/completions", {"prompt": "Hello"}
    data = json.dumps({**body, "max_tokens": MAX_TOKENS, "ignore_eos": True,
                       "stream": True}).encode()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {API_KEY}\r\n"
                 f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n"
                 .encode() + data)
    await writer.drain()
    seen = b""
    while seen.count(b"data: ") < events:
        chunk = await reader.read(65536)
        assert chunk, "the server ended a stream that should still run"
        seen += chunk
    await asyncio.sleep(delay)
    writer.close()


async def _storm(port: int) -> float:
    rng = random.Random(18)
    plan = [(rng.choice([0, 0, 1, 2, 5, 20]), rng.uniform(0.0, 1.0)) for _ in range(STREAMS)]
    await asyncio.gather(*(_abandon(port, i, n, d) for i, (n, d) in enumerate(plan)))
    return time.monotonic()  # the last hang-up


def test_disconnect_storm_frees_everything(storm_server: Server) -> None:
    srv = storm_server
    port = int(srv.url.rsplit(":", 1)[1])
    last = asyncio.run(_storm(port))
    while True:
        running, kv = _gauges(srv)
        cleaned = time.monotonic() - last
        if running == 0 and kv == 0:
            break
        assert cleaned < 10, f"{running} requests still running, KV usage {kv}"
        time.sleep(0.02)
    print(f"\ndisconnect storm ({srv.kind}, {STREAMS} streams): running and KV back to 0 "
          f"{cleaned:.3f} s after the last hang-up")
    assert cleaned < 1.0 + STEP_MS / 1000
    r = httpx.post(srv.url + "/v1/completions", headers=AUTH, timeout=30, json={
        "prompt": "Hello", "max_tokens": 5, "ignore_eos": True})
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 5


PREFILL = 50  # chat streams abandoned in their prefill


@pytest.fixture(scope="module", params=KINDS)
def slow_prefill(request: pytest.FixtureRequest, model_path: Path,
                 tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """Chunked prefill at 64 tokens a step: 50 long prompts take seconds to their first
    token, as on a loaded machine with the real model."""
    srv = start(request.param, tmp_path_factory.mktemp(request.param), "--mock-engine",
                "--mock-step-ms", str(STEP_MS), "--max-model-len", "2048",
                "--enable-chunked-prefill", "--max-num-batched-tokens", "64",
                "--api-key", API_KEY)
    yield srv
    assert stop(srv) == 0


async def _abandon_in_prefill(port: int) -> float:
    async def one(i: int) -> None:
        words = " ".join(str(i * 1000 + j) for j in range(150))  # no prefix-cache hits
        body = json.dumps({"messages": [{"role": "user", "content": words}],
                           "max_tokens": 200, "stream": True}).encode()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
                     f"{API_KEY}\r\nContent-Type: application/json\r\nContent-Length: "
                     f"{len(body)}\r\n\r\n".encode() + body)
        await writer.drain()
        await asyncio.sleep(0.5)
        assert not reader.at_eof()
        silent.append(not reader._buffer)  # type: ignore[attr-defined] # not one byte yet
        writer.close()

    silent: list[bool] = []
    await asyncio.gather(*(one(i) for i in range(PREFILL)))
    # FCFS: the first few are through their prefill by then, most are not.
    assert sum(silent) >= PREFILL // 2, silent
    return time.monotonic()


def test_hang_up_before_the_first_token_is_noticed(slow_prefill: Server) -> None:
    srv = slow_prefill
    last = asyncio.run(_abandon_in_prefill(int(srv.url.rsplit(":", 1)[1])))
    while True:
        running, kv = _gauges(srv)
        cleaned = time.monotonic() - last
        if running == 0 and kv == 0:
            break
        assert cleaned < 20, f"{running} requests still running, KV usage {kv}"
        time.sleep(0.02)
    print(f"\n{PREFILL} chat streams abandoned in their prefill ({srv.kind}): running and KV "
          f"back to 0 {cleaned:.3f} s after the last hang-up")
    assert cleaned < 1.0 + STEP_MS / 1000
