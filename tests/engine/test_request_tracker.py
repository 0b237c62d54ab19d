"""RequestTracker on the mock engine: an async iterator per request over the StepConsumer path."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

import pytest

from hybridllm.config import EngineArgs
from hybridllm.engine import async_llm_engine
from hybridllm.engine.async_llm_engine import AsyncLLMEngine, EngineDeadError
from hybridllm.engine.request_tracker import RequestTracker
from hybridllm.sampling_params import SamplingParams

PROMPT_IDS = [504, 3575, 282, 4649, 314]


def mock_engine(model_path: Path) -> AsyncLLMEngine:
    parser = EngineArgs.add_cli_args(argparse.ArgumentParser())
    args = EngineArgs.from_cli_args(parser.parse_args(
        ["--model", str(model_path), "--mock-engine", "--mock-step-ms", "1"]))
    return AsyncLLMEngine.from_engine_args(args)


async def test_outputs_per_request_early_close_aborts_and_refusals(model_path: Path) -> None:
    engine = mock_engine(model_path)
    tracker = RequestTracker(engine)
    params = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)

    async def run(rid: str) -> list[int]:
        outs = [out async for out in tracker.generate(PROMPT_IDS, params, rid)]
        assert [o.finished for o in outs] == [False] * (len(outs) - 1) + [True]
        return outs[-1].outputs[0].token_ids

    results = await asyncio.gather(*(run(f"r{i}") for i in range(8)))
    assert all(len(tokens) == 6 and tokens == results[0] for tokens in results)

    long = tracker.generate(PROMPT_IDS, SamplingParams(max_tokens=10_000, ignore_eos=True), "x")
    await long.__anext__()
    with pytest.raises(ValueError, match="already in use"):
        await tracker.generate(PROMPT_IDS, params, "x").__anext__()
    with pytest.raises(ValueError, match="out of vocabulary"):
        await tracker.generate([1, 10**6], params, "bad").__anext__()
    await long.aclose()
    sched = engine.engine.scheduler
    for _ in range(100):  # the abort lands at the next step
        if not sched.running and not sched.waiting:
            break
        await asyncio.sleep(0.01)
    assert (len(sched.running), len(sched.waiting)) == (0, 0)
    assert engine.engine.kv.num_free_blocks == engine.engine.kv.num_blocks
    await engine.shutdown()


async def test_dead_engine_ends_running_requests_and_refuses_new_ones(
        model_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(async_llm_engine, "_FAIL_AT_STEP", 4)
    engine = mock_engine(model_path)
    tracker = RequestTracker(engine)
    params = SamplingParams(temperature=0, max_tokens=50, ignore_eos=True)
    seen = []
    with pytest.raises(EngineDeadError, match="injected fault"):
        async for out in tracker.generate(PROMPT_IDS, params, "doomed"):
            seen.append(out)
    assert 0 < len(seen) < 50
    with pytest.raises(EngineDeadError):
        await tracker.generate(PROMPT_IDS, params, "after").__anext__()
