"""Both frontends as real process trees on real ports, on the mock engine (real scheduler,
gRPC and HTTP, no model) unless a test asks for more: `hybridllm serve --rust-frontend` and
the Python fallback (`hybridllm serve`, engine in-process)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.e2e.conftest import free_port, stop_serve

KINDS = ("rust", "python")
API_KEY = "sk-reliability-key"
MOCK = ["--mock-engine", "--mock-step-ms", "1", "--max-model-len", "512"]


@dataclass
class Server:
    kind: str
    proc: subprocess.Popen
    url: str
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def client(self, key: str | None = API_KEY, **kw) -> httpx.Client:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=60, **kw)


def start(kind: str, tmp: Path, *flags: str, env: dict[str, str] | None = None,
          scheme: str = "http", verify: object = True) -> Server:
    port = free_port()
    log = tmp / f"{kind}-{port}.log"
    argv = [sys.executable, "-m", "hybridllm.cli.main", "serve", "--host", "127.0.0.1",
            "--port", str(port), *flags]
    if kind == "rust":
        argv.insert(4, "--rust-frontend")
    proc = subprocess.Popen(argv, stdout=log.open("wb"), stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, env={**os.environ, **(env or {})})
    server = Server(kind, proc, f"{scheme}://127.0.0.1:{port}", log)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if httpx.get(server.url + "/health", timeout=2, verify=verify).status_code == 200:
                return server
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    stop(server)
    raise RuntimeError(f"{kind} server did not come up:\n{server.output()[-4000:]}")


def stop(server: Server) -> int:
    """SIGTERM, then the exit code (the e2e suite's rule: killed after 60 s)."""
    return stop_serve(server)  # type: ignore[arg-type]


@pytest.fixture(scope="module", params=KINDS)
def server(request: pytest.FixtureRequest, model_path: Path,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One server per frontend kind on the mock engine, with API_KEY."""
    srv = start(request.param, tmp_path_factory.mktemp(request.param), *MOCK,
                "--api-key", API_KEY)
    yield srv
    assert stop(srv) == 0
