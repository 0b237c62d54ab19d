"""Start and stop local servers for the benchmark drivers, on a free port, with their process
ids for CPU accounting: `rust` (`hybridllm serve --rust-frontend`: supervisor, engine worker,
Rust frontend), `python` (the FastAPI frontend with the engine in-process, what `hybridllm
serve` runs by default) or `python-grpc` (the FastAPI frontend over the same gRPC engine
worker as Rust: the two frontends compared with everything else equal)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(x) for x in f.read().split()]
        except OSError:
            pass
    return out


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


@dataclass
class Server:
    name: str
    proc: subprocess.Popen
    base_url: str
    log_path: str
    pids: dict[str, list[int]] = field(default_factory=dict)
    others: list[subprocess.Popen] = field(default_factory=list)  # stopped after proc

    def find_pids(self) -> None:
        """Name the processes of the tree: frontend, worker (Rust path) or server (Python)."""
        tree, todo = [], [self.proc.pid]
        while todo:
            pid = todo.pop()
            tree.append(pid)
            todo += _children(pid)
        if self.name == "python":
            self.pids = {"server": tree}
            return
        if self.name == "python-grpc":
            self.pids = {"frontend": tree, "worker": [p.pid for p in self.others]}
            return
        self.pids = {"frontend": [p for p in tree if "hybridllm-frontend" in _cmdline(p)],
                     "worker": [p for p in tree if " worker " in _cmdline(p)],
                     "supervisor": [self.proc.pid]}

    def stop(self, timeout: float = 30.0) -> None:
        for proc in (self.proc, *self.others):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


def server_argv(kind: str, port: int, engine_flags: list[str],
                engine_address: str = "") -> list[str]:
    if kind == "python-grpc":
        return [sys.executable, "-m", "hybridllm.cli.main", "serve", "--host", "127.0.0.1",
                "--port", str(port), "--disable-log-requests", "--connect-engine",
                engine_address]
    if kind == "rust":  # request logging off, as for the Python servers
        return [sys.executable, "-m", "hybridllm.cli.main", "serve", "--rust-frontend",
                "--host", "127.0.0.1", "--port", str(port), "--disable-log-requests",
                *engine_flags]
    if kind == "python":  # what `hybridllm serve` runs without --rust-frontend
        return [sys.executable, "-m", "hybridllm.cli.main", "serve", "--host", "127.0.0.1",
                "--port", str(port), "--disable-log-requests", *engine_flags]
    raise ValueError(f"unknown frontend {kind!r}")


def start_server(kind: str, engine_flags: list[str], timeout: float = 300.0) -> Server:
    port = free_port()
    log = tempfile.NamedTemporaryFile(prefix=f"hybridllm-bench-{kind}-", suffix=".log",
                                      delete=False)
    others, address = [], ""
    if kind == "python-grpc":
        address = "unix://" + os.path.join(tempfile.mkdtemp(prefix="hybridllm-"), "engine.sock")
        others.append(subprocess.Popen(
            [sys.executable, "-m", "hybridllm.cli.main", "worker", "--engine-address", address,
             *engine_flags], stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL))
    proc = subprocess.Popen(server_argv(kind, port, engine_flags, address), stdout=log,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    server = Server(kind, proc, f"http://127.0.0.1:{port}", log.name, others=others)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(p.poll() is not None for p in (proc, *others)):
            server.stop()
            raise RuntimeError(f"{kind} server exited; log:\n" + _tail(log.name))
        try:
            with urllib.request.urlopen(server.base_url + "/v1/models", timeout=2) as r:
                if r.status == 200:
                    time.sleep(0.5)  # let the tree settle before naming its processes
                    server.find_pids()
                    return server
        except OSError:
            pass
        time.sleep(0.5)
    server.stop()
    raise RuntimeError(f"{kind} server not ready after {timeout:.0f}s; log:\n" + _tail(log.name))


def _tail(path: str, n: int = 30) -> str:
    with open(path, errors="replace") as f:
        return "".join(f.readlines()[-n:])
