"""Data parallelism inside one Rust frontend: `hybridllm serve --rust-frontend -dp 2` starts
two engine workers and routes each request to one of them. 40 concurrent requests use both
(per-worker metrics) and answer exactly as one worker does; with --routing prefix, requests
sharing a long prefix stay on one worker and hit its prefix cache, as do a session's
(session_id); killing a worker ends its
requests with errors, never a hang, and serve exits non-zero; with --data-parallel-keep-alive
the other worker serves on until it too is gone."""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from tests.launch import Server, alive, child_pids, process_tree, start, stop

PROMPTS = [f"Write one word about the number {i}." for i in range(40)]
SHARED = "You are a helpful assistant. " * 30  # ~200 tokens, 12+ full blocks


def _worker_requests(url: str) -> dict[str, float]:
    text = httpx.get(url + "/metrics", timeout=10).text
    found = re.findall(r'^hybridllm:worker_requests_total\{worker="(\d+)"\} (\S+)$', text, re.M)
    return {w: float(v) for w, v in found}


def _complete(url: str, prompt: str, max_tokens: int = 6,
              ignore_eos: bool = False) -> httpx.Response:
    return httpx.post(url + "/v1/completions", timeout=120, json={
        "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
        "ignore_eos": ignore_eos})


def _texts(url: str, prompts: list[str]) -> list[str]:
    with ThreadPoolExecutor(40) as pool:
        answers = list(pool.map(lambda p: _complete(url, p), prompts))
    assert all(a.status_code == 200 for a in answers), [a.text for a in answers][:2]
    return [a.json()["choices"][0]["text"] for a in answers]


@pytest.fixture(scope="module")
def one(model_path: Path, tmp_path_factory) -> Iterator[Server]:
    srv = start("rust", tmp_path_factory.mktemp("dp1"), "--max-model-len", "512")
    yield srv
    assert stop(srv) == 0


def _two(model_path: Path, tmp: Path, *flags: str) -> Server:
    """Serving as far as serve itself knows: its supervision loop watches the workers."""
    return start("rust", tmp, "--max-model-len", "512", "--data-parallel-size", "2", *flags,
                 wait="log")


def test_two_workers_share_the_load_and_answer_alike(one: Server, model_path: Path,
                                                     tmp_path: Path) -> None:
    expected = _texts(one.url, PROMPTS)
    two = _two(model_path, tmp_path)
    try:
        assert _texts(two.url, PROMPTS) == expected
        routed = _worker_requests(two.url)
        assert set(routed) == {"0", "1"} and sum(routed.values()) == len(PROMPTS), routed
        assert min(routed.values()) > 0, routed
        print(f"\n40 concurrent requests over 2 workers: {routed}")
        # vLLM's session_id: a session's requests stay on the worker it first used, where
        # its prefix is cached; without one, idle workers take turns.
        for session in ("conversation-1", None):
            before = _worker_requests(two.url)
            for i in range(6):
                r = httpx.post(two.url + "/v1/chat/completions", timeout=120, json={
                    "messages": [{"role": "user", "content": PROMPTS[i]}], "max_tokens": 2,
                    "session_id": session})
                assert r.status_code == 200, r.text
            after = _worker_requests(two.url)
            moved = sorted(after[w] - before[w] for w in after)
            assert moved == ([0.0, 6.0] if session else [3.0, 3.0]), (session, moved)
    finally:
        assert stop(two) == 0


def test_prefix_routing_keeps_a_prefix_on_one_worker(model_path: Path, tmp_path: Path) -> None:
    two = _two(model_path, tmp_path, "--routing", "prefix", "--enable-prompt-tokens-details")
    try:
        prompts = [SHARED + f"Question {i}: what is {i} + {i}?" for i in range(6)]
        ids = [httpx.post(two.url + "/tokenize", json={"prompt": p}).json()["tokens"]
               for p in prompts]
        common = min(next(k for k, (a, b) in enumerate(zip(ids[0], x)) if a != b)
                      for x in ids[1:])
        cached = []
        for p in prompts:
            r = _complete(two.url, p, 2)
            assert r.status_code == 200, r.text
            details = r.json()["usage"]["prompt_tokens_details"]  # null: no hit (as vLLM)
            cached.append(0 if details is None else details["cached_tokens"])
        routed = _worker_requests(two.url)
        assert sorted(routed.values()) == [0.0, 6.0], routed
        # Every full block of the shared prefix is a hit once the first request filled it.
        assert cached == [0] + [common // 16 * 16] * 5, (cached, common)
        assert common >= 160
    finally:
        assert stop(two) == 0


def test_a_dead_worker_gives_errors_not_hangs(model_path: Path, tmp_path: Path) -> None:
    two = _two(model_path, tmp_path)
    everything = [two.proc.pid]
    for p in child_pids(two.proc.pid):
        everything += [p, *child_pids(p)]
    workers = [p for p in child_pids(two.proc.pid)
               if b"worker" in Path(f"/proc/{p}/cmdline").read_bytes()]
    assert len(workers) == 2
    with ThreadPoolExecutor(8) as pool:
        # ignore_eos: every request really runs 200 tokens, so the kill lands mid-request
        # (short answers could all end within the second before it on a fast machine).
        futures = [pool.submit(_complete, two.url, p, 200, True) for p in PROMPTS[:8]]
        time.sleep(1.0)
        os.kill(workers[1], signal.SIGKILL)
        start = time.monotonic()
        answers = []
        for f in futures:
            try:
                answers.append(f.result(timeout=60).status_code)
            except httpx.HTTPError as e:  # the frontend went away with the serve process
                answers.append(type(e).__name__)
    assert time.monotonic() - start < 60
    assert any(a != 200 for a in answers), answers  # the dead worker's requests failed
    assert two.proc.wait(timeout=30) != 0
    time.sleep(0.5)
    assert [p for p in everything if alive(p)] == []


def _metric(url: str, name: str) -> dict[str, float]:
    text = httpx.get(url + "/metrics", timeout=10).text
    found = re.findall(rf'^hybridllm:{name}\{{worker="(\d+)"\}} (\S+)$', text, re.M)
    return {w: float(v) for w, v in found}


def test_keep_alive_serves_on_without_the_dead_worker(model_path: Path, tmp_path: Path) -> None:
    two = _two(model_path, tmp_path, "--data-parallel-keep-alive")
    try:
        everything = process_tree(two.proc.pid)
        workers = [p for p in child_pids(two.proc.pid)
                   if b"worker" in Path(f"/proc/{p}/cmdline").read_bytes()]
        assert len(workers) == 2
        assert _metric(two.url, "worker_up") == {"0": 1.0, "1": 1.0}
        os.kill(workers[1], signal.SIGKILL)
        deadline = time.monotonic() + 5
        while _metric(two.url, "worker_up")["1"] != 0.0:
            assert time.monotonic() < deadline, "worker 1 still in the rotation after 5 s"
            time.sleep(0.1)
        assert httpx.get(two.url + "/health", timeout=10).status_code == 200
        before = _worker_requests(two.url)
        texts = _texts(two.url, PROMPTS[:12])  # every one 200, from worker 0
        after = _worker_requests(two.url)
        assert after["0"] - before["0"] == 12 and after["1"] == before["1"], (before, after)
        assert len(texts) == 12 and two.proc.poll() is None
        assert "engine worker 1 exited with status -9; serving on with 1 of 2 " \
               "(--data-parallel-keep-alive)" in two.log.read_text()
        os.kill(workers[0], signal.SIGKILL)  # the last one: serve gives up, non-zero
        assert two.proc.wait(timeout=30) != 0
        time.sleep(0.5)
        assert [p for p in everything if alive(p)] == []
    finally:
        stop(two)
