"""vLLM's `time_in_queue`: from a request's arrival to its first scheduled step, carried on
its outputs (and so to the frontends' hybridllm:request_queue_time_seconds)."""

from __future__ import annotations

import argparse
from pathlib import Path

from hybridllm.config import EngineArgs
from hybridllm.engine.llm_engine import LLMEngine
from hybridllm.sampling_params import SamplingParams

STEP_MS = 20
MAX_TOKENS = 5


def test_second_request_waits_for_the_first(model_path: Path) -> None:
    parser = EngineArgs.add_cli_args(argparse.ArgumentParser())
    args = EngineArgs.from_cli_args(parser.parse_args(
        ["--model", str(model_path), "--mock-engine", "--mock-step-ms", str(STEP_MS),
         "--max-num-seqs", "1"]))
    engine = LLMEngine.from_engine_args(args)
    params = SamplingParams(max_tokens=MAX_TOKENS, ignore_eos=True)
    engine.add_request("a", [504, 3575, 282], params)
    engine.add_request("b", [504, 3575, 282], params)
    queue: dict[str, float] = {}
    steps = 0
    while engine.has_unfinished_requests():
        steps += 1
        for out in engine.step():
            queue.setdefault(out.request_id, out.metrics["time_in_queue"])
            assert out.metrics["time_in_queue"] == queue[out.request_id]  # set once
    assert steps == 2 * MAX_TOKENS  # one sequence at a time
    # "a" ran at once; "b" waited for all of "a"'s steps (each at least STEP_MS)
    assert 0 < queue["a"] < queue["b"]
    assert queue["b"] >= MAX_TOKENS * STEP_MS / 1000
