"""Three frontends, one behaviour: the Python frontend with the in-process engine, the Python
frontend over gRPC to a worker, and the Rust frontend (`hybridllm serve --rust-frontend`).

All three are started once per session, in parallel, each with its own engine (so prefix-cache
hits, which show in usage, evolve identically), a small context window and an API key; every
case sends the same request to each and compares the normalised answers.
"""

from __future__ import annotations

import json
import math
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from hybridllm.models.resolve import DEFAULT_MODEL
from hybridllm.paths import cache_dir

MODES = ("py-inproc", "py-grpc", "rust")
API_KEY = "sk-conformance"
MAX_MODEL_LEN = 512
ENGINE_FLAGS = ["--max-model-len", str(MAX_MODEL_LEN), "--kv-cache-memory", str(64 << 20),
                "--max-num-seqs", "8"]
# The bundled model's converted folder; the `servers` fixture makes sure it exists.
MODEL = cache_dir() / "models" / DEFAULT_MODEL
BIN = Path(sys.executable).parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, mode: str, procs: list[subprocess.Popen], port: int) -> None:
        self.mode, self.procs, self.port = mode, procs, port
        self.url = f"http://127.0.0.1:{port}"
        self.http = httpx.Client(base_url=self.url, timeout=120,
                                 headers={"Authorization": f"Bearer {API_KEY}"})

    def post(self, path: str, body: Any = None, raw: bytes | None = None,
             headers: dict[str, str] | None = None) -> httpx.Response:
        content = raw if raw is not None else json.dumps(body).encode()
        return self.http.post(path, content=content,
                              headers={"content-type": "application/json", **(headers or {})})

    def stop(self) -> None:
        self.http.close()
        for p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
        for p in reversed(self.procs):
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()


def _spawn(argv: list[str], log: Path) -> subprocess.Popen:
    env = {**os.environ, "HYBRIDLLM_LOG": "warn"}
    return subprocess.Popen(argv, stdout=log.open("wb"), stderr=subprocess.STDOUT, env=env)


def _start(mode: str, logdir: Path) -> Server:
    port = _free_port()
    frontend = ["--host", "127.0.0.1", "--port", str(port), "--api-key", API_KEY]
    procs = []
    if mode == "rust":
        procs.append(_spawn([str(BIN / "hybridllm"), "serve", str(MODEL), "--rust-frontend",
                             *ENGINE_FLAGS, *frontend], logdir / "rust.log"))
    else:
        cmd = [sys.executable, "-m", "hybridllm.entrypoints.openai", "--model", str(MODEL),
               "--disable-log-requests", *ENGINE_FLAGS, *frontend]
        if mode == "py-grpc":
            sock = os.path.join(tempfile.mkdtemp(prefix="hybridllm-conf-"), "engine.sock")
            procs.append(_spawn([str(BIN / "hybridllm"), "worker", "--model", str(MODEL),
                                 "--engine-address", f"unix://{sock}", *ENGINE_FLAGS],
                                logdir / "worker.log"))
            cmd += ["--connect-engine", f"unix://{sock}"]
        procs.append(_spawn(cmd, logdir / f"{mode}.log"))
    return Server(mode, procs, port)


def _wait(server: Server, deadline: float, logdir: Path) -> None:
    while time.monotonic() < deadline:
        if any(p.poll() is not None for p in server.procs):
            break
        try:
            if httpx.get(server.url + "/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    logs = "\n".join(f"--- {f.name}\n{f.read_text()[-3000:]}" for f in logdir.iterdir())
    server.stop()
    raise RuntimeError(f"{server.mode} frontend did not become healthy\n{logs}")


@pytest.fixture(scope="session")
def servers(
    tmp_path_factory: pytest.TempPathFactory, model_path: Path
) -> Iterator[dict[str, Server]]:
    assert model_path == MODEL.resolve()
    logdirs = {m: tmp_path_factory.mktemp(m) for m in MODES}
    started = {m: _start(m, logdirs[m]) for m in MODES}  # all load in parallel
    try:
        deadline = time.monotonic() + 240
        for m, s in started.items():
            _wait(s, deadline, logdirs[m])
        yield started
    finally:
        for s in started.values():
            s.stop()


# Per-request random fields; everything else must match exactly.
_RANDOM = re.compile(rb'"(chatcmpl|cmpl|modelperm)-[0-9a-f]{32}(-\d+)?"|"created":\d+')


def normalise_bytes(body: bytes) -> bytes:
    return _RANDOM.sub(lambda m: b'"created":0' if m.group(0).startswith(b'"created')
                       else b'"ID"', body)


def split_logprobs(value: Any, path: str = "") -> tuple[Any, dict[str, float]]:
    """Replaces every float under a logprob-ish key by a placeholder; returns the floats."""
    floats: dict[str, float] = {}

    def walk(v: Any, p: str) -> Any:
        if isinstance(v, float):
            floats[p] = v
            return "<float>"
        if isinstance(v, dict):
            return {k: walk(x, f"{p}/{k}") for k, x in v.items()}
        if isinstance(v, list):
            return [walk(x, f"{p}/{i}") for i, x in enumerate(v)]
        return v

    return walk(value, path), floats


def assert_same(results: dict[str, Any], tol: float = 1e-4) -> None:
    """Equal structures and values; floats (logprobs) within tol."""
    ref_mode = "rust"
    ref_shape, ref_floats = split_logprobs(results[ref_mode])
    for mode, value in results.items():
        if mode == ref_mode:
            continue
        shape, floats = split_logprobs(value)
        # Dumped, so that key order counts too.
        assert json.dumps(shape) == json.dumps(ref_shape), f"{mode} differs from {ref_mode}"
        for k, x in floats.items():
            assert math.isclose(x, ref_floats[k], abs_tol=tol), f"{mode} {k}: {x} vs " \
                f"{ref_floats[k]}"


def parse_sse(body: bytes) -> list[Any]:
    assert body.endswith(b"data: [DONE]\n\n"), body[-200:]
    frames = body.split(b"\n\n")
    assert frames[-1] == b""
    out = []
    for f in frames[:-2]:
        assert f.startswith(b"data: "), f
        out.append(json.loads(f[6:]))
    return out
