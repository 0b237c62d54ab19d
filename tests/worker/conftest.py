"""Start real `hybridllm worker` processes on unix sockets."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from hybridllm.proto import engine_pb2 as pb
from hybridllm.proto import engine_pb2_grpc as pb_grpc


def start_worker(model: Path, extra_env: dict[str, str] | None = None,
                 args: list[str] | None = None) -> tuple[subprocess.Popen, str]:
    sock = os.path.join(tempfile.mkdtemp(prefix="hybridllm-test-"), "engine.sock")
    address = f"unix://{sock}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "hybridllm.cli.main", "worker", "--model", str(model),
         "--engine-address", address, "--max-model-len", "2048", *(args or [])],
        env={**os.environ, **(extra_env or {})},
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"worker exited early with {proc.returncode}")
        if os.path.exists(sock) and _healthy(address):
            return proc, address
        time.sleep(0.2)
    proc.kill()
    raise TimeoutError("worker did not become healthy")


def _healthy(address: str) -> bool:
    """A blocking probe, usable from sync fixtures and async tests alike."""
    with grpc.insecure_channel(address) as channel:
        try:
            resp = pb_grpc.EngineStub(channel).Health(pb.HealthRequest(), timeout=1.0)
        except grpc.RpcError:
            return False
    return resp.status == pb.HealthResponse.SERVING


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def worker(model_path: Path) -> Iterator[str]:
    proc, address = start_worker(model_path)
    yield address
    stop(proc)
