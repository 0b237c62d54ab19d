"""The served half of tests/structured: a Rust-frontend and a Python-fallback server of the
bundled model, started once for the package's tests (the corpus and the fuzzed inputs)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.launch import Server, start, stop, wait_ready

FLAGS = ["--max-model-len", "512", "--max-num-seqs", "64", "--kv-cache-memory", str(256 << 20)]


@pytest.fixture(scope="session")
def served(tmp_path_factory: pytest.TempPathFactory, model_path: Path) -> Iterator[dict]:
    """{"rust": ..., "python": ...}, loaded in parallel."""
    servers: dict[str, Server] = {}
    try:
        for kind in ("rust", "python"):
            servers[kind] = start(kind, tmp_path_factory.mktemp(kind), *FLAGS,
                                  "--disable-log-requests", model=model_path,
                                  env={"HYBRIDLLM_LOG": "warn"}, wait=False)
        for s in servers.values():
            wait_ready(s)
        yield servers
    finally:
        for s in servers.values():
            stop(s)
