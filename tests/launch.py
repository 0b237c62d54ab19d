"""The one way the suite starts servers and workers as real processes, and stops them.

`start(kind, folder, *flags)` runs `hybridllm serve` on a free port of 127.0.0.1, logging to a
file in `folder`, and waits until GET /health answers 200. Kinds:
  rust         `serve --rust-frontend` (serve supervises an engine worker and the frontend)
  python       `serve` (the FastAPI frontend, engine in-process)
  python-grpc  a separate `hybridllm worker` on a unix socket (given the engine flags among
               `flags`) and `serve --connect-engine` over it
`start_worker(model, *flags)` runs a bare `hybridllm worker` and waits for its gRPC health.
`stop(server)` ends either: SIGTERM, the kill after a timeout, frontend before worker.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import httpx

KINDS = ("rust", "python", "python-grpc")
CLI = [sys.executable, "-m", "hybridllm.cli.main"]
SERVING = "hybridllm: serving"  # what `serve` prints once it serves (after its own check)
_DEFAULT: Any = object()

Wait = bool | Literal["health", "log"]


@dataclass
class Server:
    """A server (or, kind "worker", a bare engine worker, its gRPC address as url): procs in
    start order (a worker before its frontend); the last is the main process."""

    kind: str
    procs: list[subprocess.Popen]
    url: str
    log: Path
    api_key: str | None = None
    _http: httpx.Client | None = field(default=None, repr=False)

    @property
    def proc(self) -> subprocess.Popen:
        return self.procs[-1]

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def client(self, key: str | None = _DEFAULT, **kw: Any) -> httpx.Client:
        """A new client on the server's url, with `key` (default: the server's first
        --api-key; None: no key)."""
        key = self.api_key if key is _DEFAULT else key
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        kw.setdefault("timeout", 60)
        return httpx.Client(base_url=self.url, headers=headers, **kw)

    @property
    def http(self) -> httpx.Client:
        """One long-lived client with the server's key (closed by stop)."""
        if self._http is None:
            self._http = self.client(timeout=120)
        return self._http

    def post(self, path: str, body: Any = None, raw: bytes | None = None,
             headers: dict[str, str] | None = None) -> httpx.Response:
        """POST of `body` as JSON (or of the bytes `raw`) with the server's key."""
        content = raw if raw is not None else json.dumps(body).encode()
        return self.http.post(path, content=content,
                              headers={"content-type": "application/json", **(headers or {})})

    def stop(self, timeout: float = 60) -> int:
        return stop(self, timeout)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn(argv: Sequence[str], log: Path, env: dict[str, str] | None = None
          ) -> subprocess.Popen:
    """`argv` with stdout and stderr to the file `log`, `env` over this environment."""
    return subprocess.Popen(list(argv), stdout=log.open("wb"), stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, env={**os.environ, **(env or {})})


def start(kind: str, folder: Path, *flags: str, model: Path | str | None = None,
          env: dict[str, str] | None = None, scheme: str = "http", verify: Any = True,
          wait: Wait = True, port: int | None = None, timeout: float = 240) -> Server:
    """`hybridllm serve` of `kind` with `flags` (and --model `model` if given; without it, the
    bundled default). wait: True or "health" (GET /health answers 200), "log" (serve printed
    that it serves: with --rust-frontend that comes after its own /health check, so the
    supervision loop runs), False (not at all; see wait_ready). A server that does not come
    up is stopped, and RuntimeError names its log's tail."""
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}")
    port = free_port() if port is None else port
    models = [] if model is None else ["--model", str(model)]
    argv = [*CLI, "serve", "--host", "127.0.0.1", "--port", str(port), *models, *flags]
    procs = []
    if kind == "rust":
        argv.insert(len(CLI) + 1, "--rust-frontend")
    elif kind == "python-grpc":
        worker = start_worker(model, *engine_flags(flags), env=env, wait=bool(wait),
                              log=folder / f"worker-{port}.log", timeout=timeout)
        procs.append(worker.proc)
        argv += ["--connect-engine", worker.url]
    procs.append(spawn(argv, folder / f"{kind}-{port}.log", env))
    server = Server(kind, procs, f"{scheme}://127.0.0.1:{port}", folder / f"{kind}-{port}.log",
                    api_key=_first(flags, "--api-key"))
    if wait:
        wait_ready(server, timeout, "log" if wait == "log" else "health", verify)
    return server


def wait_ready(server: Server, timeout: float = 240, how: str = "health",
               verify: Any = True) -> None:
    """Until GET /health answers 200 (how="health") or the log says it serves (how="log");
    a process that exits, or the timeout, stops the server and raises RuntimeError."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and all(p.poll() is None for p in server.procs):
        if how == "log":
            if SERVING in server.output():
                return
        else:
            try:
                if httpx.get(server.url + "/health", timeout=2,
                             verify=verify).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
        time.sleep(0.2)
    stop(server)
    raise RuntimeError(f"{server.kind} server did not come up:\n{_logs(server)}")


def both_frontends(folder: Callable[[str], Path], model: Path | str,
                   *flags: str) -> Iterator[dict[str, Server]]:
    """{"rust": ..., "python": ...} serving `model` with `flags`, loaded in parallel (each in
    `folder(kind)`); stopped when the caller is done (a session fixture's body)."""
    servers: dict[str, Server] = {}
    try:
        for kind in ("rust", "python"):
            servers[kind] = start(kind, folder(kind), *flags, "--disable-log-requests",
                                  model=model, env={"HYBRIDLLM_LOG": "warn"}, wait=False)
        for s in servers.values():
            wait_ready(s)
        yield servers
    finally:
        for s in servers.values():
            stop(s)


def engine_flags(flags: Sequence[str]) -> list[str]:
    """Those of `flags` (with their values) that `hybridllm worker` takes: the engine's."""
    from hybridllm.config import EngineArgs

    parser = argparse.ArgumentParser()
    EngineArgs.add_cli_args(parser)
    parser.add_argument("--shutdown-timeout")
    known = parser._option_string_actions
    out, keep = [], False
    for flag in flags:
        if flag.startswith("-") and not flag[1:2].isdigit():
            keep = flag.split("=", 1)[0] in known
        if keep:
            out.append(flag)
    return out


def start_worker(model: Path | str | None, *flags: str, env: dict[str, str] | None = None,
                 log: Path | None = None, wait: bool = True, timeout: float = 120) -> Server:
    """`hybridllm worker` on a new unix socket (its address is the url), logging to `log`
    (default: worker.log beside the socket); waits for gRPC Health SERVING unless told not
    to. A worker that does not come up is stopped, and RuntimeError names its log's tail."""
    folder = tempfile.mkdtemp(prefix="hybridllm-test-")  # short: a socket path's limit
    sock = os.path.join(folder, "engine.sock")
    address = f"unix://{sock}"
    log = Path(folder) / "worker.log" if log is None else log
    models = [] if model is None else ["--model", str(model)]
    proc = spawn([*CLI, "worker", *models, "--engine-address", address, *flags], log, env)
    server = Server("worker", [proc], address, log)
    deadline = time.monotonic() + timeout
    while wait:
        if proc.poll() is not None or time.monotonic() > deadline:
            stop(server)
            raise RuntimeError(f"worker did not become healthy (exit status {proc.returncode})"
                               f":\n{server.output()[-4000:]}")
        if os.path.exists(sock) and worker_healthy(address):
            break
        time.sleep(0.2)
    return server


def worker_healthy(address: str) -> bool:
    """A blocking gRPC Health probe, usable from sync fixtures and async tests alike."""
    import grpc

    from hybridllm.proto import engine_pb2 as pb
    from hybridllm.proto import engine_pb2_grpc as pb_grpc

    with grpc.insecure_channel(address) as channel:
        try:
            resp = pb_grpc.EngineStub(channel).Health(pb.HealthRequest(), timeout=1.0)
        except grpc.RpcError:
            return False
    return resp.status == pb.HealthResponse.SERVING


def stop(server: Server, timeout: float = 60) -> int:
    """SIGTERM to each process, the frontend before its worker, each killed if still there
    after `timeout` s; the main process's exit code."""
    if server._http is not None:
        server._http.close()
        server._http = None
    for proc in reversed(server.procs):
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
        proc.wait()
    return server.proc.wait()


def metric(server: Server, name: str) -> float:
    """The sum of a metric's samples (every label set) on /metrics, with the server's key."""
    headers = {"Authorization": f"Bearer {server.api_key}"} if server.api_key else {}
    text = httpx.get(server.url + "/metrics", headers=headers).text
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


def running(pid: int) -> bool:
    """Alive and not a zombie waiting for a reaper."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _first(flags: Sequence[str], name: str) -> str | None:
    for i, flag in enumerate(flags[:-1]):
        if flag == name:
            return flags[i + 1]
    return None


def _logs(server: Server) -> str:
    """The tail of the server's log, and of its worker's where it has one of its own."""
    worker = server.log.with_name(server.log.name.replace(server.kind, "worker", 1))
    text = server.output()[-4000:]
    if server.kind == "python-grpc" and worker.exists():
        text = f"--- {worker.name}\n{worker.read_text(errors='replace')[-3000:]}\n" \
               f"--- {server.log.name}\n{text}"
    return text
