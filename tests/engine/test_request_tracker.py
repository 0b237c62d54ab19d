"""RequestTracker on the mock engine: an async iterator per request over the StepConsumer path."""

from __future__ import annotations

import argparse
import asyncio
import threading
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


async def test_engine_loads_and_steps_on_one_thread(model_path: Path) -> None:
    """from_engine_args builds the engine on the thread that steps it (one OpenMP pool per
    process: async_llm_engine's docstring); a build that fails raises in the caller."""
    engine = mock_engine(model_path)
    stepped: set[int] = set()
    step = engine.engine.step_requests

    def recording_step(*args: object, **kwargs: object) -> object:
        stepped.add(threading.get_ident())
        return step(*args, **kwargs)

    engine.engine.step_requests = recording_step  # type: ignore[method-assign]
    built_on = engine._thread
    assert built_on is not None and built_on is not threading.current_thread()
    assert built_on.is_alive() and built_on.name == "engine-loop"
    params = SamplingParams(temperature=0, max_tokens=3, ignore_eos=True)
    outs = [o async for o in RequestTracker(engine).generate(PROMPT_IDS, params, "r")]
    assert len(outs[-1].outputs[0].token_ids) == 3
    assert stepped == {built_on.ident}
    await engine.shutdown()
    assert not built_on.is_alive()

    def broken() -> async_llm_engine.LLMEngine:
        raise RuntimeError("no model here")

    with pytest.raises(RuntimeError, match="no model here"):
        AsyncLLMEngine.on_own_thread(broken)


async def test_an_engine_never_started_shuts_down(model_path: Path) -> None:
    engine = mock_engine(model_path)
    thread = engine._thread
    assert thread is not None and thread.is_alive()
    await engine.shutdown()
    assert not thread.is_alive()
