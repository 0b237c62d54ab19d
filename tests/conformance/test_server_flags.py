"""Serve flags of vLLM that change what every request gets (#34), in both frontends:
`--enable-force-include-usage` ends every stream with its usage, asked for or not, as vLLM's
flag does (`continuous_usage_stats` then follows the request's stream_options)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conformance.conftest import parse_sse
from tests.launch import Server, both_frontends

FLAGS = ["--max-model-len", "512", "--max-num-seqs", "4", "--kv-cache-memory", str(64 << 20),
         "--enable-force-include-usage"]


@pytest.fixture(scope="module")
def forced(tmp_path_factory: pytest.TempPathFactory,
           model_path: Path) -> Iterator[dict[str, Server]]:
    yield from both_frontends(tmp_path_factory.mktemp, model_path, *FLAGS)


BODIES = {
    "/v1/chat/completions": {"messages": [{"role": "user", "content": "Hi"}]},
    "/v1/completions": {"prompt": "The capital of France is"},
}


@pytest.mark.parametrize("path", list(BODIES))
@pytest.mark.parametrize("options", [None, {"include_usage": False},
                                     {"include_usage": False, "continuous_usage_stats": True}])
def test_every_stream_ends_with_its_usage(forced: dict[str, Server], path: str,
                                          options: dict[str, Any] | None) -> None:
    body: dict[str, Any] = {**BODIES[path], "max_tokens": 5, "temperature": 0,
                            "ignore_eos": True, "stream": True}
    if options is not None:
        body["stream_options"] = options
    usages = {}
    for kind, s in forced.items():
        chunks = parse_sse(s.post(path, body).content)
        final = chunks[-1]
        assert final["choices"] == [], (kind, final)
        u = final["usage"]
        assert (u["completion_tokens"], u["total_tokens"]) == (5, u["prompt_tokens"] + 5), kind
        continuous = bool(options and options.get("continuous_usage_stats"))
        running = [c["usage"] for c in chunks[:-1]]
        if continuous:
            assert all(r is not None and r["prompt_tokens"] == u["prompt_tokens"]
                       for r in running), kind
            assert running[-1]["completion_tokens"] == 5, kind
        else:
            assert all(r is None for r in running), kind
        # Not streamed, the usage is there anyway, and the same.
        whole = s.post(path, {**BODIES[path], "max_tokens": 5, "temperature": 0,
                              "ignore_eos": True}).json()
        counts = ("prompt_tokens", "completion_tokens", "total_tokens")  # cache hits aside
        assert [whole["usage"][k] for k in counts] == [u[k] for k in counts], kind
        usages[kind] = [u[k] for k in counts]
    assert usages["rust"] == usages["python"]
