"""Real `hybridllm worker` processes on unix sockets (started by tests/launch.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.launch import start_worker, stop

WORKER_FLAGS = ["--max-model-len", "2048"]


@pytest.fixture(scope="module")
def worker(model_path: Path) -> Iterator[str]:
    """The gRPC address of a worker of the bundled model."""
    w = start_worker(model_path, *WORKER_FLAGS)
    yield w.url
    stop(w)
