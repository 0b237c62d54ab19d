"""Ahead-of-time sm_90 compilation of every kernel (see compile_sm90.py), in a subprocess
without TRITON_INTERPRET, so the GPU code path is type-checked even on a CPU-only machine."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton.backends.nvidia", reason="Triton without its NVIDIA backend")


def test_all_kernels_compile_for_sm90() -> None:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    script = Path(__file__).with_name("compile_sm90.py")
    proc = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr[-4000:]
