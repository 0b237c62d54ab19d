"""Faults on the real model: kill -9 of the engine worker under load (the Rust frontend, and
the Python fallback over a separate `hybridllm worker`), kill -9 of the Rust frontend. Every
in-flight stream gets an SSE error event and then its end, every non-streamed request a 503
with an OpenAI error body, /health turns 503 within 1 s, `serve` exits non-zero within 10 s
and leaves no process behind; the port can be bound again."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import httpx

from hybridllm.entrypoints.rust_frontend import bind_listen_socket
from tests.launch import Server, metric, process_tree, running, start, stop
from tests.reliability.conftest import API_KEY

AUTH = {"Authorization": f"Bearer {API_KEY}"}
STREAMS, PLAIN = 3, 2  # in-flight requests of each kind when the worker dies
BODY = {"prompt": "Count to a thousand:", "max_tokens": 1500, "ignore_eos": True}


def _serve(tmp: Path, kind: str = "rust") -> Server:
    """Serving as far as serve itself knows (its supervision loop is watching), kinds rust or
    python-grpc (its worker, with the same engine flags, started first)."""
    return start(kind, tmp, "--max-model-len", "2048", "--api-key", API_KEY, wait="log")


def _tree(pid: int) -> list[int]:
    """Every descendant of pid."""
    return process_tree(pid)[1:]


def _stream(url: str, started: threading.Event) -> list[str]:
    """An SSE stream's data lines, read to the end of the connection; `started` is set at its
    first token."""
    lines = []
    with httpx.stream("POST", url + "/v1/completions", headers=AUTH, timeout=60,
                      json={**BODY, "stream": True}) as r:
        assert r.status_code == 200, r.read()
        for line in r.iter_lines():
            if line.startswith("data: "):
                lines.append(line[6:])
                started.set()
    return lines


def _plain(url: str) -> httpx.Response:
    return httpx.post(url + "/v1/completions", headers=AUTH, timeout=60, json=BODY)


def _start_load(pool: ThreadPoolExecutor, srv: Server) -> tuple[list[Future], list[Future]]:
    url = srv.url
    started = [threading.Event() for _ in range(STREAMS)]
    streams = [pool.submit(_stream, url, e) for e in started]
    plain = [pool.submit(_plain, url) for _ in range(PLAIN)]
    deadline = time.monotonic() + 60
    while metric(srv, "hybridllm:num_requests_running") < STREAMS + PLAIN:
        assert time.monotonic() < deadline, "the load never ran"
        time.sleep(0.1)
    for e in started:  # every stream has tokens out: the kill comes mid-stream
        assert e.wait(max(0.1, deadline - time.monotonic())), "a stream never started"
    return streams, plain


def _check_failed_requests(streams: list[Future], plain: list[Future]) -> None:
    for f in streams:
        lines = f.result(timeout=30)
        if lines[-1] == "[DONE]":  # vLLM, too, ends a failed stream with its error, then this
            lines.pop()
        assert "choices" not in lines[-1], "a stream ended without an error event"
        error = json.loads(lines[-1])["error"]
        assert error["code"] == 503 and error["type"] and error["message"], error
        assert len(lines) >= 2  # it had tokens before the error
    for f in plain:
        r = f.result(timeout=30)
        assert r.status_code == 503, r.text
        error = r.json()["error"]
        assert error["code"] == 503 and error["type"] and error["message"], error


def _wait_503(url: str, since: float) -> float:
    while True:
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 503:
                return time.monotonic() - since
        except httpx.HTTPError:
            pass  # a closed listener is no health either, but the promise is a 503
        assert time.monotonic() - since < 5, "/health never answered 503"
        time.sleep(0.02)


def test_kill9_worker_rust_frontend(model_path: Path, tmp_path: Path) -> None:
    srv = _serve(tmp_path)
    tree = _tree(srv.proc.pid)
    try:
        worker = next(p for p in tree if b" worker " in Path(f"/proc/{p}/cmdline")
                      .read_bytes().replace(b"\0", b" "))
        with ThreadPoolExecutor(STREAMS + PLAIN) as pool:
            streams, plain = _start_load(pool, srv)
            killed = time.monotonic()
            os.kill(worker, signal.SIGKILL)
            to_503 = _wait_503(srv.url, killed)
            _check_failed_requests(streams, plain)
        code = srv.proc.wait(timeout=max(0.1, 10 - (time.monotonic() - killed)))
        to_exit = time.monotonic() - killed
        print(f"\nkill -9 of the worker (Rust frontend): /health 503 after {to_503:.3f} s, "
              f"serve exited {code} after {to_exit:.2f} s")
        assert code != 0 and to_503 < 1.0
        assert not [p for p in tree if running(p)], "an orphan outlived serve"
    finally:
        srv.proc.kill()


def test_kill9_worker_python_frontend(model_path: Path, tmp_path: Path) -> None:
    srv = _serve(tmp_path, "python-grpc")
    worker = srv.procs[0]
    tree = _tree(srv.proc.pid)
    try:
        with ThreadPoolExecutor(STREAMS + PLAIN) as pool:
            streams, plain = _start_load(pool, srv)
            killed = time.monotonic()
            worker.kill()
            to_503 = _wait_503(srv.url, killed)
            _check_failed_requests(streams, plain)
        code = srv.proc.wait(timeout=max(0.1, 10 - (time.monotonic() - killed)))
        to_exit = time.monotonic() - killed
        print(f"\nkill -9 of the worker (Python frontend): /health 503 after {to_503:.3f} s, "
              f"serve exited {code} after {to_exit:.2f} s")
        assert code != 0 and to_503 < 1.0
        assert not [p for p in tree if running(p)], "an orphan outlived serve"
    finally:
        srv.proc.kill()
        stop(srv)  # the worker


def test_kill9_rust_frontend(model_path: Path, tmp_path: Path) -> None:
    srv = _serve(tmp_path)
    tree = _tree(srv.proc.pid)
    try:
        frontend = next(p for p in tree if b"hybridllm-frontend" in
                        Path(f"/proc/{p}/cmdline").read_bytes())
        killed = time.monotonic()
        os.kill(frontend, signal.SIGKILL)
        code = srv.proc.wait(timeout=10)
        to_exit = time.monotonic() - killed
        print(f"\nkill -9 of the Rust frontend: serve exited {code} after {to_exit:.2f} s")
        assert code != 0
        assert "Rust frontend exited" in srv.output()
        assert not [p for p in tree if running(p)], "the worker outlived serve"
        # The port is free again: a new server binds it as `serve` does.
        with bind_listen_socket("127.0.0.1", int(srv.url.rsplit(":", 1)[1])) as sock:
            sock.listen(1)
    finally:
        srv.proc.kill()
