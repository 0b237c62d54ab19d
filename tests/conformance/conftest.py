"""Three frontends, one behaviour: the Python frontend with the in-process engine, the Python
frontend over gRPC to a worker, and the Rust frontend (`hybridllm serve --rust-frontend`).

All three are started once per session, in parallel, each with its own engine (so prefix-cache
hits, which show in usage, evolve identically), a small context window and an API key; every
case sends the same request to each and compares the normalised answers.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from hybridllm.models.resolve import DEFAULT_MODEL
from hybridllm.paths import cache_dir
from tests.launch import Server, start, stop, wait_ready

MODES = ("py-inproc", "py-grpc", "rust")
KIND = {"py-inproc": "python", "py-grpc": "python-grpc", "rust": "rust"}  # tests/launch.py's
API_KEY = "sk-conformance"
MAX_MODEL_LEN = 512
# --enable-prompt-tokens-details: usage shows prefix-cache hits (cache_salt's check).
ENGINE_FLAGS = ["--max-model-len", str(MAX_MODEL_LEN), "--kv-cache-memory", str(64 << 20),
                "--max-num-seqs", "8", "--enable-prompt-tokens-details"]
# The bundled model's converted folder; the `servers` fixture makes sure it exists.
MODEL = cache_dir() / "models" / DEFAULT_MODEL


def start_all(tmp_path_factory: pytest.TempPathFactory, model: Path,
              flags: list[str]) -> Iterator[dict[str, Server]]:
    """The three frontends of `model` with the engine `flags`, loaded in parallel; stopped
    when the caller is done."""
    started: dict[str, Server] = {}
    try:
        for m in MODES:
            quiet = [] if m == "rust" else ["--disable-log-requests"]
            started[m] = start(KIND[m], tmp_path_factory.mktemp(m), *flags, *quiet,
                               "--api-key", API_KEY, model=model, env={"HYBRIDLLM_LOG": "warn"},
                               wait=False)
        deadline = time.monotonic() + 240
        for s in started.values():
            wait_ready(s, max(0.0, deadline - time.monotonic()))
            s.http  # noqa: B018  (the shared client, made before tests use it from threads)
        yield started
    finally:
        for s in started.values():
            stop(s)


# Package scope: the servers stop when this folder's tests are done, so the suite never holds
# every folder's servers at once (about 4 GB a pair on CPU; together they ran out of memory).
@pytest.fixture(scope="package")
def servers(
    tmp_path_factory: pytest.TempPathFactory, model_path: Path
) -> Iterator[dict[str, Server]]:
    assert model_path == MODEL.resolve()
    yield from start_all(tmp_path_factory, MODEL, ENGINE_FLAGS)


# Per-request random values; everything else must match.
_ID = re.compile(r"(chatcmpl(-tool)?|cmpl|embd|modelperm)-[0-9a-f]{32}(-\d+)?"
                 r"|(resp|msg)_[0-9a-f]{32}")
_TIMES = ("created", "created_at")


def normalise(value: Any) -> Any:
    """A parsed body with its ids and `created` / `created_at` timestamps masked."""
    if isinstance(value, dict):
        return {k: 0 if k in _TIMES and type(x) is int else normalise(x)
                for k, x in value.items()}
    if isinstance(value, list):
        return [normalise(x) for x in value]
    if isinstance(value, str) and _ID.fullmatch(value):
        return "ID"
    return value


def parsed(r: httpx.Response) -> Any:
    """The JSON body, ids and timestamps masked."""
    return normalise(json.loads(r.content))


def assert_equal(value: Any, ref: Any, tol: float = 0.0, where: str = "") -> None:
    """Equal JSON values: the same keys (in any order), list items, strings, booleans and
    nulls; numbers equal as numbers (Rust's 1.0 is Python's 1), two floats within tol."""
    if isinstance(ref, dict):
        assert isinstance(value, dict), f"{where}: {value!r} vs {ref!r}"
        assert value.keys() == ref.keys(), f"{where}: keys {sorted(value)} vs {sorted(ref)}"
        for k in ref:
            assert_equal(value[k], ref[k], tol, f"{where}/{k}")
    elif isinstance(ref, list):
        assert isinstance(value, list) and len(value) == len(ref), f"{where}: {value!r} vs {ref!r}"
        for i, (x, y) in enumerate(zip(value, ref)):
            assert_equal(x, y, tol, f"{where}/{i}")
    elif isinstance(ref, (int, float)) and not isinstance(ref, bool):
        ok = (type(value) in (int, float)
              and (math.isclose(value, ref, abs_tol=tol)
                   if type(value) is float and type(ref) is float else value == ref))
        assert ok, f"{where}: {value!r} vs {ref!r}"
    else:
        assert type(value) is type(ref) and value == ref, f"{where}: {value!r} vs {ref!r}"


def assert_same(results: dict[str, Any], tol: float = 1e-4) -> None:
    """Every frontend's value equals the Rust frontend's; floats (logprobs) within tol."""
    for mode, value in results.items():
        if mode != "rust":
            assert_equal(value, results["rust"], tol, f"{mode} vs rust")


def parse_sse(body: bytes) -> list[Any]:
    """The events of an SSE body, each `data: <json>\n\n`, the last `data: [DONE]\n\n`;
    parsed, ids and timestamps masked."""
    assert body.endswith(b"data: [DONE]\n\n"), body[-200:]
    frames = body.split(b"\n\n")
    assert frames[-1] == b""
    out = []
    for f in frames[:-2]:
        assert f.startswith(b"data: "), f
        out.append(normalise(json.loads(f[6:])))
    return out


def parse_named_sse(body: bytes) -> list[tuple[str, Any]]:
    """The events of a named-event SSE body (the Responses API's), each
    `event: <name>\ndata: <json>\n\n`, no [DONE]; parsed, ids and timestamps masked."""
    frames = body.split(b"\n\n")
    assert frames[-1] == b"", body[-200:]
    out = []
    for f in frames[:-1]:
        head, data = f.split(b"\n", 1)
        assert head.startswith(b"event: ") and data.startswith(b"data: "), f
        out.append((head[7:].decode(), normalise(json.loads(data[6:]))))
    return out
