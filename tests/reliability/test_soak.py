"""A bounded soak (`hybridllm bench soak`; long runs by hand, docs/reliability.md): rounds of
1,000 concurrent streams on the mock engine all complete with their token counts, and after
the warm-up round neither frontend nor worker grows its memory beyond 5 % or its open file
descriptors beyond 16, with no leaked-task warning in the log."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.parametrize(("frontend", "rounds"), [("rust", 3), ("python", 2)])
def test_soak(frontend: str, rounds: int, model_path: Path) -> None:
    r = subprocess.run([sys.executable, "-m", "hybridllm.cli.main", "bench", "soak",
                        "--frontend", frontend, "--rounds", str(rounds), "--requests", "1000",
                        "--output-len", "8"], capture_output=True, text=True, timeout=300)
    print(r.stdout)
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    lines = [x for x in r.stdout.splitlines() if re.match(r"\s*(warm-up|round \d+):", x)]
    assert len(lines) == rounds + 1
    assert all("1000 ok, 0 failed, 8000 tokens" in x for x in lines), lines
    assert f"soak ({frontend}, 1000 concurrent streams x {rounds} rounds after a warm-up): " \
           "PASSED" in r.stdout
