"""Data parallelism behind an external load balancer (vLLM's multi-port external-LB mode):
one complete server per rank on `--port + rank`, each a child `hybridllm serve` with its own
engine socket, its slice of the GPUs (or its share of the cores), output prefixed
`[dp rank r]`, and a parent-death signal; an aggregated `/health` on the supervisor port.

A rank that stops answering: `/health` is 503 naming it, and after `failure_threshold`
consecutive failed probes (one per interval, each at most `timeout_s`) the supervisor stops
every rank and exits 1 (no silent restart; vLLM's semantics), unless `keep_alive`
(`--data-parallel-keep-alive`): then the failed rank is stopped, `/health` stays 503 naming
it, and the others serve on until none is left. SIGTERM drains every rank."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from hybridllm.entrypoints.rust_frontend import PARENT_PID_ENV, wait_or_kill

STOP_OTHERS_TIMEOUT_S = 5.0  # after a rank failed: how long the others get to stop


@dataclass
class HealthProbe:
    interval_s: float = 1.0
    timeout_s: float = 1.0
    failure_threshold: int = 3


@dataclass
class Rank:
    rank: int
    port: int
    proc: subprocess.Popen[bytes]
    started: bool = False  # answered /health once: failures count from then on
    failures: int = 0
    healthy: bool = False
    dead: bool = False  # failed and stopped; the others serve on (keep_alive)
    error: str = "starting"
    reader: threading.Thread | None = field(default=None, repr=False)

    def as_json(self) -> dict[str, Any]:
        return {"rank": self.rank, "port": self.port, "pid": self.proc.pid,
                "healthy": self.healthy, "consecutive_failures": self.failures,
                **({} if self.healthy else {"error": self.error})}


def rank_env(rank: int, size: int, tp: int) -> dict[str, str]:
    """The rank's environment: its GPUs (a slice of the visible ones, or 0..N*tp-1), its
    share of the cores as torch's thread count, and the parent-death signal's marker."""
    env = dict(os.environ)
    visible = env.get("CUDA_VISIBLE_DEVICES")
    ids = visible.split(",") if visible else [str(i) for i in range(size * tp)]
    env["CUDA_VISIBLE_DEVICES"] = ",".join(ids[rank * tp:(rank + 1) * tp])
    env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // size))
    env[PARENT_PID_ENV] = str(os.getpid())
    return env


class DPSupervisor:
    def __init__(self, serve_argv: list[str], size: int, host: str, port: int,
                 supervisor_port: int, probe: HealthProbe, shutdown_timeout_s: float,
                 tp: int = 1, keep_alive: bool = False) -> None:
        self.serve_argv, self.size, self.host, self.port = serve_argv, size, host, port
        self.supervisor_port, self.probe, self.tp = supervisor_port, probe, tp
        self.shutdown_timeout_s, self.keep_alive = shutdown_timeout_s, keep_alive
        self.ranks: list[Rank] = []
        self.stop = threading.Event()
        self.lock = threading.Lock()

    def health(self) -> tuple[int, dict[str, Any]]:
        with self.lock:
            ranks = [r.as_json() for r in self.ranks]
        bad = [r["rank"] for r in ranks if not r["healthy"]]
        body = {"status": "unhealthy" if bad else "healthy", "data_parallel_size": self.size,
                "unhealthy_ranks": bad, "ranks": ranks}
        return (503 if bad else 200), body

    def _spawn(self, rank: int) -> Rank:
        port = self.port + rank
        argv = [sys.executable, "-m", "hybridllm.cli.main", *self.serve_argv,
                "--port", str(port), "--data-parallel-size", "1",
                "--data-parallel-rank", str(rank)]
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=rank_env(rank, self.size, self.tp))
        r = Rank(rank, port, proc)
        r.reader = threading.Thread(target=_prefix_lines, args=(proc, f"[dp rank {rank}] "),
                                    daemon=True)
        r.reader.start()
        return r

    def _probe(self, r: Rank) -> None:
        if r.dead:
            return
        url = f"http://{_connect_host(self.host)}:{r.port}/health"
        if r.proc.poll() is not None:  # gone: no need to wait for a refused connection
            ok, error = False, f"exited with status {r.proc.returncode}"
        else:
            try:
                with urllib.request.urlopen(url, timeout=self.probe.timeout_s) as resp:
                    ok, error = resp.status == 200, f"/health answered {resp.status}"
            except OSError as e:
                ok, error = False, f"/health failed: {e}"
        with self.lock:
            if ok:
                r.started, r.healthy, r.failures, r.error = True, True, 0, ""
            elif r.started:
                r.healthy, r.failures, r.error = False, r.failures + 1, error

    def _failed_rank(self) -> Rank | None:
        """A rank that exited before serving, or failed `failure_threshold` probes in a row."""
        with self.lock:
            for r in self.ranks:
                if r.dead:
                    continue
                if not r.started and r.proc.poll() is not None:
                    r.error = f"exited with status {r.proc.returncode} before serving"
                    return r
                if r.failures >= self.probe.failure_threshold:
                    return r
        return None

    def run(self) -> int:
        server = _health_server(self, self.host, self.supervisor_port)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: self.stop.set())
        with self.lock:
            self.ranks = [self._spawn(r) for r in range(self.size)]
        print(f"hybridllm: data-parallel supervisor: {self.size} ranks on ports {self.port}.."
              f"{self.port + self.size - 1}, aggregated /health on port {self.supervisor_port}",
              flush=True)
        failed = None
        try:
            with ThreadPoolExecutor(self.size) as pool:
                while not self.stop.is_set() and failed is None:
                    start = time.monotonic()
                    list(pool.map(self._probe, self.ranks))  # each at most timeout_s
                    failed = self._failed_rank()
                    if failed is not None and self._serve_on_without(failed):
                        failed = None
                        continue
                    if failed is None:
                        self.stop.wait(max(0.0, start + self.probe.interval_s - time.monotonic()))
            if failed is not None:
                print(f"hybridllm: data-parallel rank {failed.rank} failed ({failed.error}); "
                      "stopping every rank", flush=True)
            code = self._stop_all(STOP_OTHERS_TIMEOUT_S if failed else self.shutdown_timeout_s + 10)
            return 1 if failed is not None else code
        finally:
            server.shutdown()
            server.server_close()

    def _serve_on_without(self, failed: Rank) -> bool:
        """With keep_alive and another rank still live: stop the failed rank (a hung one must
        not half-serve its port) and go on. False when the supervisor must stop."""
        live = [r for r in self.ranks if not r.dead and r is not failed]
        if not self.keep_alive or not live or not failed.started:  # start-up failures stop all
            return False
        print(f"hybridllm: data-parallel rank {failed.rank} failed ({failed.error}); serving "
              f"on with {len(live)} of {self.size} ranks (--data-parallel-keep-alive)",
              flush=True)
        if failed.proc.poll() is None:
            failed.proc.send_signal(signal.SIGTERM)
            wait_or_kill(failed.proc, STOP_OTHERS_TIMEOUT_S)
        with self.lock:
            failed.dead, failed.healthy = True, False
        return True

    def _stop_all(self, timeout_s: float) -> int:
        """SIGTERM to every rank at once, SIGKILL to any still there after timeout_s; 0 when
        every rank exited 0."""
        for r in self.ranks:
            if r.proc.poll() is None:
                r.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        for r in self.ranks:
            wait_or_kill(r.proc, max(0.1, deadline - time.monotonic()))
            if r.reader is not None:
                r.reader.join(timeout=2)
        live = [r for r in self.ranks if not r.dead]  # the dead were reported when they failed
        for r in live:
            if r.proc.returncode != 0:
                print(f"hybridllm: data-parallel rank {r.rank} exited with status "
                      f"{r.proc.returncode}", flush=True)
        return 0 if all(r.proc.returncode == 0 for r in live) else 1


def _connect_host(host: str) -> str:
    return "127.0.0.1" if host in ("0.0.0.0", "") else f"[{host}]" if ":" in host else host


def _prefix_lines(proc: subprocess.Popen[bytes], prefix: str) -> None:
    assert proc.stdout is not None
    for line in proc.stdout:
        sys.stdout.write(prefix + line.decode(errors="replace"))
        sys.stdout.flush()


def _health_server(sup: DPSupervisor, host: str, port: int) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            status, body = sup.health() if self.path == "/health" else (404, {
                "error": {"message": "Not Found", "type": "NotFoundError", "param": None,
                          "code": 404}})
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:  # probes every second: not logged
            pass

    class Server(ThreadingHTTPServer):
        daemon_threads = True

    return Server((host, port), Handler)
