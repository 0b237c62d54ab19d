"""`hybridllm serve --rust-frontend` as a real process tree on a real port."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

API_KEY = "e2e-test-key"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Server:
    proc: subprocess.Popen
    url: str
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")


def start_serve(model: Path, tmp: Path, *extra: str, wait: bool = True) -> Server:
    """model: the converted default model's folder (asked for so that conversion is done)."""
    port = free_port()
    log = tmp / f"serve-{port}.log"
    proc = subprocess.Popen(
        # No model argument: the bundled default, served under its short name.
        [sys.executable, "-m", "hybridllm.cli.main", "serve", "--rust-frontend",
         "--port", str(port), "--max-model-len", "512", *extra],
        stdout=log.open("wb"), stderr=subprocess.STDOUT,
    )
    server = Server(proc, f"http://127.0.0.1:{port}", log)
    if wait:
        deadline = time.monotonic() + 180
        while "hybridllm: serving" not in server.output():
            if proc.poll() is not None or time.monotonic() > deadline:
                stop_serve(server)
                raise RuntimeError(f"serve did not come up:\n{server.output()}")
            time.sleep(0.2)
    return server


def stop_serve(server: Server) -> int:
    if server.proc.poll() is None:
        server.proc.send_signal(signal.SIGTERM)
        try:
            server.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.proc.kill()
    return server.proc.wait()


@pytest.fixture(scope="module")
def server(model_path: Path, tmp_path_factory) -> Iterator[Server]:
    srv = start_serve(model_path, tmp_path_factory.mktemp("e2e"), "--api-key", API_KEY)
    yield srv
    assert stop_serve(srv) == 0


def metric(url: str, name: str) -> float:
    text = httpx.get(url + "/metrics", headers={"Authorization": f"Bearer {API_KEY}"}).text
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            total += float(line.rsplit(" ", 1)[1])
    return total


def child_pids(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def process_tree(pid: int) -> list[int]:
    """pid and every process below it."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += child_pids(p)
    return out


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
