"""The served half of tests/structured: a Rust-frontend and a Python-fallback server of the
bundled model, started once for the package's tests (the corpus and the fuzzed inputs)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.launch import Server, both_frontends

FLAGS = ["--max-model-len", "512", "--max-num-seqs", "64", "--kv-cache-memory", str(256 << 20)]


# Package scope: the servers stop when this folder's tests are done, so the suite never holds
# every folder's servers at once (about 4 GB a pair on CPU; together they ran out of memory).
@pytest.fixture(scope="package")
def served(tmp_path_factory: pytest.TempPathFactory,
           model_path: Path) -> Iterator[dict[str, Server]]:
    """{"rust": ..., "python": ...}, loaded in parallel."""
    yield from both_frontends(tmp_path_factory.mktemp, model_path, *FLAGS)
