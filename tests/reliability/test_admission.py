"""Admission control, counted in the engine so that every frontend shares it: with
--max-waiting-queue-length N, a request that would make more than N sequences wait gets 429
(OpenAI error body, Retry-After) at once, streaming or not; the running requests finish
untouched, and once the queue drains new requests are taken again."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import openai
import pytest

from tests.launch import Server, start, stop
from tests.reliability.conftest import API_KEY, KINDS, gauge

RUNNING, WAITING = 2, 3  # --max-num-seqs, --max-waiting-queue-length
LONG = 300  # tokens of each running request: 300 steps of at least 20 ms
AUTH = {"Authorization": f"Bearer {API_KEY}"}
OVERLOADED = {"error": {
    "message": f"The server is overloaded: {WAITING} sequences are waiting to be scheduled and "
               f"the limit (--max-waiting-queue-length) is {WAITING}. Retry later.",
    "type": "RateLimitError", "param": None, "code": 429}}


@pytest.fixture(scope="module", params=KINDS)
def busy(request: pytest.FixtureRequest, model_path: Path,
         tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = start(request.param, tmp_path_factory.mktemp(request.param), "--mock-engine",
                "--mock-step-ms", "20", "--max-model-len", "512",
                "--max-num-seqs", str(RUNNING), "--max-waiting-queue-length", str(WAITING),
                "--api-key", API_KEY)
    yield srv
    assert stop(srv) == 0


def _complete(srv: Server, max_tokens: int) -> int:
    r = httpx.post(srv.url + "/v1/completions", headers=AUTH, timeout=120, json={
        "prompt": "Hello", "max_tokens": max_tokens, "ignore_eos": True})
    assert r.status_code == 200, r.text
    return r.json()["usage"]["completion_tokens"]


def test_requests_beyond_the_queue_get_429_at_once(busy: Server) -> None:
    with ThreadPoolExecutor(RUNNING + WAITING) as pool:
        running = [pool.submit(_complete, busy, LONG) for _ in range(RUNNING)]
        deadline = time.monotonic() + 30
        while gauge(busy, "num_requests_running") < RUNNING:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        waiting = [pool.submit(_complete, busy, 4) for _ in range(WAITING)]
        while gauge(busy, "num_requests_waiting") < WAITING:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        # The queue is full: refused at once, streaming or not, through any endpoint.
        client = openai.OpenAI(base_url=busy.url + "/v1", api_key=API_KEY, max_retries=0)
        model = client.models.list().data[0].id
        latencies = []
        for stream in (False, True):
            t0 = time.monotonic()
            with pytest.raises(openai.RateLimitError) as e:
                client.completions.create(model=model, prompt="Hi", max_tokens=4, stream=stream)
            latencies.append(time.monotonic() - t0)
            assert e.value.status_code == 429
            assert e.value.response.headers["retry-after"] == "1"
            assert e.value.response.json() == OVERLOADED
            t0 = time.monotonic()
            r = httpx.post(busy.url + "/v1/chat/completions", headers=AUTH, json={
                "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4,
                "stream": stream})
            latencies.append(time.monotonic() - t0)
            assert (r.status_code, r.json()) == (429, OVERLOADED)
            assert r.headers["retry-after"] == "1"
        # "At once": answered while the queue was still full, not once it drained.
        assert not any(f.done() for f in running + waiting)
        # The running ones were not touched, and the queued ones ran after them.
        assert [f.result() for f in running] == [LONG] * RUNNING
        assert [f.result() for f in waiting] == [4] * WAITING
    print(f"\n{busy.kind}: 429 answered in {max(latencies) * 1000:.0f} ms at most "
          f"({len(latencies)} requests, {RUNNING} running for {LONG} steps of 20 ms)")
    assert max(latencies) < 2.0  # a loose bound: the machine may be loaded
    assert _complete(busy, 3) == 3  # the queue drained: taken again
    assert httpx.get(busy.url + "/health").status_code == 200


def test_a_request_wider_than_the_queue_is_refused(busy: Server) -> None:
    # n sequences wait together: more than the whole queue can never be admitted.
    r = httpx.post(busy.url + "/v1/completions", headers=AUTH, json={
        "prompt": "Hi", "max_tokens": 2, "n": WAITING + 1})
    assert r.status_code == 429 and r.headers["retry-after"] == "1"
    assert r.json()["error"]["message"].startswith("The server is overloaded: 0 sequences")
    r = httpx.post(busy.url + "/v1/completions", headers=AUTH, json={
        "prompt": "Hi", "max_tokens": 2, "n": WAITING})
    assert r.status_code == 200 and len(r.json()["choices"]) == WAITING
