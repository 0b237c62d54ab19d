"""Servers for tests/tools: a Rust-frontend and a Python-fallback server of the bundled model
with vLLM's tool flags (the Hermes format, a Hermes-style template, auto tool choice), started
once for the package."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.launch import Server, both_frontends

# A Hermes-style template of the repository's own (tests/data/chat_templates).
HERMES_TEMPLATE = (Path(__file__).resolve().parents[1] / "data" / "chat_templates"
                   / "hermes_tools.jinja")
FLAGS = ["--max-model-len", "2048", "--max-num-seqs", "16", "--kv-cache-memory", str(256 << 20),
         "--chat-template", str(HERMES_TEMPLATE), "--tool-call-parser", "hermes",
         "--enable-auto-tool-choice"]


# Package scope: the servers stop when this folder's tests are done, so the suite never holds
# every folder's servers at once (about 4 GB a pair on CPU; together they ran out of memory).
@pytest.fixture(scope="package")
def served(tmp_path_factory: pytest.TempPathFactory,
           model_path: Path) -> Iterator[dict[str, Server]]:
    """{"rust": ..., "python": ...}, loaded in parallel."""
    yield from both_frontends(tmp_path_factory.mktemp, model_path, *FLAGS)
