"""LLM.generate's "Processed prompts" bar, as vLLM's: on by default on a terminal, off with
use_tqdm=False, and quiet when stderr is not a terminal (logs, CI)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pexpect

SCRIPT = """
import sys
from hybridllm import LLM, SamplingParams
llm = LLM(model=sys.argv[1], mock_engine=True, max_model_len=256)
params = SamplingParams(max_tokens=4, ignore_eos=True)
print("BEGIN default", flush=True)
assert len(llm.generate(["a", "b", "c"], params)) == 3
print("END default", flush=True)
assert len(llm.generate(["a", "b"], params, use_tqdm=False)) == 2
print("END off", flush=True)
assert len(llm.chat([[{"role": "user", "content": "hi"}]] * 2, params)) == 2
print("END chat", flush=True)
"""


def test_bar_on_a_terminal(model_path: Path) -> None:
    child = pexpect.spawn(sys.executable, ["-c", SCRIPT, str(model_path)], encoding="utf-8",
                          timeout=120, dimensions=(24, 200))
    child.expect_exact("BEGIN default")
    child.expect_exact("END default")
    assert "Processed prompts: 100%" in child.before and "3/3" in child.before, child.before
    child.expect_exact("END off")
    assert "Processed prompts" not in child.before, child.before  # use_tqdm=False
    child.expect_exact("END chat")
    assert "Processed prompts: 100%" in child.before and "2/2" in child.before, child.before
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0


def test_quiet_when_not_a_terminal(model_path: Path) -> None:
    r = subprocess.run([sys.executable, "-c", SCRIPT, str(model_path)], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[-1] == "END chat"
    assert "Processed prompts" not in r.stderr, r.stderr
