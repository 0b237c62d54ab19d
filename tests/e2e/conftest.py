"""`hybridllm serve --rust-frontend` as a real process tree on a real port."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.launch import Server, start, stop

API_KEY = "e2e-test-key"


@pytest.fixture(scope="module")
def server(model_path: Path, tmp_path_factory) -> Iterator[Server]:
    srv = start("rust", tmp_path_factory.mktemp("e2e"), "--max-model-len", "512", "--api-key",
                API_KEY)
    yield srv
    assert stop(srv) == 0
