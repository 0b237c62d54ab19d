"""Both frontends as real process trees on real ports, on the mock engine (real scheduler,
gRPC and HTTP, no model) unless a test asks for more: `hybridllm serve --rust-frontend` and
the Python fallback (`hybridllm serve`, engine in-process). Started by tests/launch.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.launch import Server, start, stop

KINDS = ("rust", "python")
API_KEY = "sk-reliability-key"
MOCK = ["--mock-engine", "--mock-step-ms", "1", "--max-model-len", "512"]


@pytest.fixture(scope="module", params=KINDS)
def server(request: pytest.FixtureRequest, model_path: Path,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One server per frontend kind on the mock engine, with API_KEY."""
    srv = start(request.param, tmp_path_factory.mktemp(request.param), *MOCK,
                "--api-key", API_KEY)
    yield srv
    assert stop(srv) == 0


def gauge(srv: Server, name: str) -> float:
    """A hybridllm:<name> metric of the server (keyed with API_KEY), summed over its labels."""
    text = httpx.get(srv.url + "/metrics", headers={"Authorization": f"Bearer {API_KEY}"}).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(f"hybridllm:{name}"))
