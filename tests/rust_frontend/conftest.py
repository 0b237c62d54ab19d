"""Shared fixtures for the Rust frontend's parity tests (driven through its hidden `text`
subcommands, so no server or worker is needed)."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _find_binary() -> str | None:
    env = os.environ.get("HYBRIDLLM_RUST_FRONTEND_PATH")
    if env:
        return env
    venv_bin = Path(sys.executable).parent / "hybridllm-frontend"
    if venv_bin.exists():
        return str(venv_bin)
    return shutil.which("hybridllm-frontend")


@pytest.fixture(scope="session")
def frontend_bin() -> str:
    path = _find_binary()
    if not path:
        pytest.fail("hybridllm-frontend binary not found (set HYBRIDLLM_RUST_FRONTEND_PATH)")
    return path


@pytest.fixture(scope="session")
def model_dir(model_path: Path) -> Path:
    """The bundled model's folder (converted on first use; see tests/conftest.py)."""
    return model_path


@pytest.fixture(scope="session")
def run_text(frontend_bin):
    """Runs `hybridllm-frontend text <args>` with JSON on stdin; returns (rc, json|None, stderr)."""

    def run(args: list[str], payload) -> tuple[int, object, str]:
        proc = subprocess.run(
            [frontend_bin, "text", *args],
            input=json.dumps(payload),
            capture_output=True,
            text=True,
            timeout=120,
        )
        out = json.loads(proc.stdout) if proc.returncode == 0 else None
        return proc.returncode, out, proc.stderr

    return run
