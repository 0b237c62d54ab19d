"""Data parallelism behind an external load balancer: `hybridllm serve -dp 2
--data-parallel-external-lb` supervises two complete servers (bundled model, Rust frontend)
on --port and --port + 1, with an aggregated /health on --port + 2. Both ranks answer alike;
kill -9 of one rank's worker turns the aggregated health to 503 naming the rank, then the
supervisor stops everything and exits non-zero within 10 s, leaving no process behind;
SIGTERM drains every rank and exits 0; with --data-parallel-keep-alive the other rank serves
on (aggregated health 503 naming the dead one). Refused combinations name both flags."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from tests.launch import alive, child_pids, free_port, process_tree, start

INTERVAL, THRESHOLD = 0.5, 3
Q = [{"role": "user", "content": "What is the capital of France?"}]


class Supervised:
    def __init__(self, tmp: Path, model: Path, *extra: str) -> None:
        # Three consecutive ports: the two ranks and the aggregated health.
        while True:
            self.port = free_port()
            if all(_port_free(self.port + i) for i in (1, 2)):
                break
        # Waited for by the tests, on the supervisor's aggregated health.
        server = start("rust", tmp, "--data-parallel-size", "2", "--data-parallel-external-lb",
                       "--max-model-len", "256", "--health-probe-interval", str(INTERVAL),
                       "--health-probe-timeout", str(INTERVAL), "--health-failure-threshold",
                       str(THRESHOLD), *extra, model=model, port=self.port, wait=False)
        self.proc, self.log = server.proc, server.log
        self.health = f"http://127.0.0.1:{self.port + 2}/health"

    def wait_healthy(self) -> dict:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and self.proc.poll() is None:
            try:
                r = httpx.get(self.health, timeout=2)
                if r.status_code == 200:
                    return r.json()
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        raise AssertionError(f"not healthy:\n{self.log.read_text()[-4000:]}")

    def kill_all(self) -> None:
        for p in process_tree(self.proc.pid)[::-1]:
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait()


def _port_free(port: int) -> bool:
    import socket

    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


@pytest.fixture
def supervised(tmp_path: Path, model_path: Path) -> Iterator[Supervised]:
    s = Supervised(tmp_path, model_path)
    yield s
    if s.proc.poll() is None:
        s.kill_all()


def test_two_ranks_serve_and_a_dead_rank_stops_all(supervised: Supervised) -> None:
    s = supervised
    health = s.wait_healthy()
    assert health["status"] == "healthy" and health["unhealthy_ranks"] == []
    assert [(r["rank"], r["port"], r["healthy"]) for r in health["ranks"]] == [
        (0, s.port, True), (1, s.port + 1, True)]
    texts = []
    for rank in (0, 1):
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{s.port + rank}/v1",
                               api_key="unused", max_retries=0)
        model = client.models.list().data[0].id
        r = client.chat.completions.create(model=model, messages=Q,
                                           max_tokens=8, temperature=0)
        texts.append(r.choices[0].message.content)
    assert texts[0] == texts[1] and texts[0]
    log = s.log.read_text()
    assert "hybridllm serve: mode dp-supervisor" in log
    assert "[dp rank 0] hybridllm serve: mode rust (data-parallel rank 0)" in log
    assert "[dp rank 1] hybridllm serve: mode rust (data-parallel rank 1)" in log

    everything = process_tree(s.proc.pid)
    rank1 = health["ranks"][1]["pid"]
    worker = next(p for p in child_pids(rank1)
                  if b"worker" in Path(f"/proc/{p}/cmdline").read_bytes())
    killed = time.monotonic()
    os.kill(worker, signal.SIGKILL)
    saw_503 = None
    while s.proc.poll() is None and time.monotonic() - killed < 15:
        try:
            r = httpx.get(s.health, timeout=1)
            if r.status_code == 503 and saw_503 is None:
                saw_503 = time.monotonic() - killed
                body = r.json()
                assert body["status"] == "unhealthy" and body["unhealthy_ranks"] == [1], body
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    exited = time.monotonic() - killed
    print(f"\nkill -9 of rank 1's worker: 503 after {saw_503} s, supervisor exited after "
          f"{exited:.2f} s")
    assert s.proc.poll() is not None and s.proc.returncode != 0, s.log.read_text()[-3000:]
    assert saw_503 is not None and saw_503 <= INTERVAL * THRESHOLD + 1.0, saw_503
    assert exited <= 10.0, exited
    assert "data-parallel rank 1 failed" in s.log.read_text()
    time.sleep(0.5)
    assert [p for p in everything if alive(p)] == [], "processes left behind"


def test_sigterm_drains_every_rank(supervised: Supervised) -> None:
    s = supervised
    health = s.wait_healthy()
    everything = process_tree(s.proc.pid)
    assert len([r for r in health["ranks"] if r["healthy"]]) == 2
    s.proc.send_signal(signal.SIGTERM)
    assert s.proc.wait(timeout=60) == 0, s.log.read_text()[-3000:]
    time.sleep(0.5)
    assert [p for p in everything if alive(p)] == []


def test_keep_alive_serves_on_with_the_other_rank(tmp_path: Path, model_path: Path) -> None:
    s = Supervised(tmp_path, model_path, "--data-parallel-keep-alive")
    try:
        health = s.wait_healthy()
        rank1 = health["ranks"][1]["pid"]
        worker = next(p for p in child_pids(rank1)
                      if b"worker" in Path(f"/proc/{p}/cmdline").read_bytes())
        os.kill(worker, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while "serving on with 1 of 2 ranks" not in s.log.read_text():
            assert time.monotonic() < deadline and s.proc.poll() is None, s.log.read_text()
            time.sleep(0.2)
        time.sleep(2 * INTERVAL * THRESHOLD)  # well past the threshold: still supervising
        assert s.proc.poll() is None
        r = httpx.get(s.health, timeout=5)
        body = r.json()
        assert r.status_code == 503 and body["unhealthy_ranks"] == [1], body
        assert [x["healthy"] for x in body["ranks"]] == [True, False]
        assert not alive(rank1)  # the failed rank was stopped, not left half-serving
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{s.port}/v1", api_key="unused",
                               max_retries=0)
        r0 = client.chat.completions.create(model=client.models.list().data[0].id,
                                            messages=Q, max_tokens=4, temperature=0)
        assert r0.choices[0].finish_reason == "length" and r0.usage.completion_tokens == 4
        everything = process_tree(s.proc.pid)
        s.proc.send_signal(signal.SIGTERM)
        assert s.proc.wait(timeout=60) == 0, s.log.read_text()[-3000:]
        time.sleep(0.5)
        assert [p for p in everything if alive(p)] == []
    finally:
        if s.proc.poll() is None:
            s.kill_all()


@pytest.mark.parametrize(("flags", "message"), [
    (["--data-parallel-size", "2"],
     "--data-parallel-size 2 needs --rust-frontend (one frontend over N workers) or "
     "--data-parallel-external-lb"),
    (["--data-parallel-size", "2", "--rust-frontend", "--connect-engine", "unix:///x"],
     "--data-parallel-size 2 and --connect-engine cannot go together"),
    (["-dp", "2", "--data-parallel-multi-port-external-lb", "--connect-engine", "unix:///x"],
     "--data-parallel-external-lb and --connect-engine cannot go together"),
    (["-dp", "0"], "--data-parallel-size must be at least 1, got 0"),
    (["-tp", "2"], "--tensor-parallel-size 2 must divide the attention heads (9) and the KV "
                   "heads (3) of SmolLM2-135M-Instruct"),
    (["-tp", "3", "--nnodes", "2"], "--nnodes 2 must divide --tensor-parallel-size 3"),
    (["-tp", "2", "--nnodes", "2", "--node-rank", "1"],
     "--headless and --node-rank 1 go together"),
    (["-tp", "2", "--nnodes", "2", "--node-rank", "1", "--headless", "--rust-frontend"],
     "--headless and --rust-frontend cannot go together"),
    (["--data-parallel-keep-alive"], "--data-parallel-keep-alive needs --data-parallel-size > 1"),
])
def test_refused_combinations(flags: list[str], message: str) -> None:
    r = subprocess.run([sys.executable, "-m", "hybridllm.cli.main", "serve", *flags],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert message in r.stdout, r.stdout
