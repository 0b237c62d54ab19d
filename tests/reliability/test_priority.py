"""--scheduling-policy priority through both frontends, on the mock engine: with every seat
of the batch taken, a high-priority request that arrives after three low-priority ones gets
its first token before any of them (so its TTFT is lower though it waited less), and the
low-priority ones keep their arrival order among themselves. Without the flag a non-zero
priority is a 400 naming it.

Two seats (--max-num-seqs 2) held by requests of 400 and 500 tokens at 20 ms a step: the
first seat frees at step ~400 (8 s or more, time enough to queue the other four even on a
loaded machine), the second at ~500, so each later request (5 tokens) gets the seat alone,
and the order of first tokens is the order of admission."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import httpx
import openai
import pytest

from tests.launch import Server, start, stop
from tests.reliability.conftest import API_KEY, KINDS, gauge

AUTH = {"Authorization": f"Bearer {API_KEY}"}


@pytest.fixture(scope="module", params=KINDS)
def prio(request: pytest.FixtureRequest, model_path: Path,
         tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = start(request.param, tmp_path_factory.mktemp(request.param), "--mock-engine",
                "--mock-step-ms", "20", "--max-model-len", "512", "--max-num-seqs", "2",
                "--scheduling-policy", "priority", "--api-key", API_KEY)
    yield srv
    assert stop(srv) == 0


def _wait_for(srv: Server, name: str, value: int) -> None:
    deadline = time.monotonic() + 30
    while gauge(srv, name) < value:
        assert time.monotonic() < deadline, f"{name} never reached {value}"
        time.sleep(0.02)


def _first_token_at(srv: Server, max_tokens: int, priority: int) -> tuple[float, float]:
    """(sent, first token received), monotonic; the stream is read to its end."""
    sent, first = time.monotonic(), None
    with httpx.stream("POST", srv.url + "/v1/completions", headers=AUTH, timeout=120, json={
            "prompt": "Hello", "max_tokens": max_tokens, "ignore_eos": True, "stream": True,
            "priority": priority}) as r:
        assert r.status_code == 200, r.read()
        tokens = 0
        for line in r.iter_lines():
            if not line.startswith("data: {"):
                continue
            if json.loads(line[6:])["choices"][0]["text"] and first is None:
                first = time.monotonic()
            tokens += 1
    assert first is not None and tokens >= 1
    return sent, first


def test_a_high_priority_request_overtakes_the_queue(prio: Server) -> None:
    with ThreadPoolExecutor(6) as pool:
        holders = [pool.submit(_first_token_at, prio, n, 0) for n in (400, 500)]
        _wait_for(prio, "num_requests_running", 2)
        lows: list[Future[tuple[float, float]]] = []
        for i in range(3):
            lows.append(pool.submit(_first_token_at, prio, 5, 1))
            _wait_for(prio, "num_requests_waiting", i + 1)
        high = pool.submit(_first_token_at, prio, 5, -1)
        _wait_for(prio, "num_requests_waiting", 4)
        results = {"high": high.result(), **{f"low{i}": f.result() for i, f in enumerate(lows)}}
        for f in holders:
            f.result()
    by_first_token = sorted(results, key=lambda k: results[k][1])
    assert by_first_token == ["high", "low0", "low1", "low2"]
    ttft = {k: first - sent for k, (sent, first) in results.items()}
    print(f"[{prio.kind}] TTFT ms: " + ", ".join(f"{k} {v * 1000:.0f}" for k, v in ttft.items()))
    assert all(ttft["high"] < ttft[f"low{i}"] for i in range(3)), ttft


def test_without_the_policy_priority_is_refused(server: Server) -> None:
    client = openai.OpenAI(base_url=server.url + "/v1", api_key=API_KEY, max_retries=0)
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=client.models.list().data[0].id, prompt="Hi",
                                  max_tokens=2, extra_body={"priority": -1})
    assert e.value.response.json() == {"error": {
        "message": "Got priority -1 but Priority scheduling is not enabled (start the server "
                   "with --scheduling-policy priority).",
        "type": "BadRequestError", "param": "priority", "code": 400}}
    r = client.completions.create(model=client.models.list().data[0].id, prompt="Hi",
                                  max_tokens=2, extra_body={"priority": 0})
    assert r.usage.completion_tokens == 2
