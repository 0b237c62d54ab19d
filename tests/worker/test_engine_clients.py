"""The Python frontend's two engine clients: in-process and over gRPC, both through EngineMux on
one GenerateStream call, must answer alike; closing a request's iterator aborts it; a dead
in-process engine ends requests with FINISH_REASON_ERROR, a worker gone fails them."""

from __future__ import annotations

import argparse
import asyncio
import math
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from hybridllm.config import EngineArgs
from hybridllm.engine import async_llm_engine
from hybridllm.engine.async_llm_engine import AsyncLLMEngine
from hybridllm.engine.llm_engine import LLMEngine
from hybridllm.proto import engine_pb2 as pb
from hybridllm.server.engine_client import (
    EngineCallError,
    EngineClient,
    GrpcEngineClient,
    InProcessEngineClient,
)
from tests.launch import start_worker, stop
from tests.worker.conftest import WORKER_FLAGS

# "Name three rivers of Europe:", sent once to each engine (no prefix-cache hits on either).
PROMPT_IDS = [5820, 1296, 7626, 282, 1910, 42]
OTHER_IDS = [504, 3575, 282, 4649, 314]  # "The capital of France is"


def engine_args(*flags: str) -> EngineArgs:
    parser = EngineArgs.add_cli_args(argparse.ArgumentParser())
    return EngineArgs.from_cli_args(parser.parse_args(list(flags)))


@pytest.fixture(scope="module")
def llm_engine(model_path: Path) -> Iterator[LLMEngine]:
    """Built as the worker fixture builds its own: one per module, wrapped anew per test (an
    AsyncLLMEngine belongs to the event loop it started in)."""
    yield LLMEngine.from_engine_args(engine_args("--model", str(model_path),
                                                 "--max-model-len", "2048"), detokenize=False)


@pytest.fixture(params=["in-process", "grpc"])
async def client(request: pytest.FixtureRequest, llm_engine: LLMEngine,
                 worker: str) -> AsyncIterator[EngineClient]:
    c: EngineClient = (InProcessEngineClient(AsyncLLMEngine(llm_engine), "test")
                       if request.param == "in-process" else GrpcEngineClient(worker))
    await c.wait_ready()
    yield c
    await c.close()


def split_floats(msg: pb.GenerateResponse) -> tuple[bytes, list[float]]:
    """The message without its logprob values, and those values: two engines in two processes
    may round the last bit differently."""
    msg = pb.GenerateResponse.FromString(msg.SerializeToString())
    if msg.HasField("prompt"):
        msg.prompt.queue_time_s = 0.0  # a wait measured in each engine: compared apart
    floats: list[float] = []
    positions = list(msg.prompt.prompt_logprobs)
    for seq in msg.sequences:
        floats.append(seq.cumulative_logprob)
        seq.cumulative_logprob = 0.0
        positions += seq.logprobs
    for pos in positions:
        for lp in (pos.token, *pos.top):
            floats.append(lp.logprob)
            lp.logprob = 0.0
    return msg.SerializeToString(deterministic=True), floats


async def test_in_process_and_grpc_clients_give_identical_responses(
        llm_engine: LLMEngine, worker: str) -> None:
    params = pb.SamplingParams(temperature=0.0, max_tokens=12, logprobs=2, prompt_logprobs=1)
    local = InProcessEngineClient(AsyncLLMEngine(llm_engine), "test")
    remote = GrpcEngineClient(worker)
    got = {}
    for name, c in (("in-process", local), ("grpc", remote)):
        await c.wait_ready()
        got[name] = [m async for m in c.generate("same", PROMPT_IDS, params)]
        with pytest.raises(EngineCallError) as err:
            await c.generate("bad", [1, 2, 10**6], params).__anext__()
        got[name + " refusal"] = (err.value.code, err.value.message)
        await c.close()
    assert got["in-process refusal"] == got["grpc refusal"]
    assert got["in-process refusal"][0] == "INVALID_ARGUMENT"
    local_msgs, remote_msgs = got["in-process"], got["grpc"]
    assert len(local_msgs) == len(remote_msgs) == 12  # one message per step
    assert remote_msgs[0].prompt.prompt_tokens == len(PROMPT_IDS)
    assert local_msgs[0].prompt.queue_time_s > 0 and remote_msgs[0].prompt.queue_time_s > 0
    assert remote_msgs[-1].sequences[0].finish_reason == pb.FINISH_REASON_LENGTH
    for a, b in zip(local_msgs, remote_msgs):
        (a_rest, a_floats), (b_rest, b_floats) = split_floats(a), split_floats(b)
        assert a_rest == b_rest
        assert len(a_floats) == len(b_floats)
        assert all(math.isclose(x, y, abs_tol=1e-4) or (math.isnan(x) and math.isnan(y))
                   for x, y in zip(a_floats, b_floats))


async def wait_idle(client: EngineClient) -> pb.LoadResponse:
    for _ in range(100):  # an abort lands at the next engine step
        load = await client.load()
        if load.num_running == 0 and load.num_waiting == 0:
            break
        await asyncio.sleep(0.05)
    return load


async def test_closing_the_iterator_early_aborts_the_request(client: EngineClient) -> None:
    long = pb.SamplingParams(temperature=0.0, max_tokens=1000, ignore_eos=True)
    stream = client.generate("long", OTHER_IDS, long)
    got = [await stream.__anext__() for _ in range(3)]
    assert not got[-1].finished
    assert (await client.load()).num_running == 1
    await stream.aclose()
    load = await wait_idle(client)
    assert (load.num_running, load.num_waiting) == (0, 0)
    assert load.num_free_blocks == load.num_total_blocks  # every block back
    # The engine serves the next request as usual, the same id included.
    short = pb.SamplingParams(temperature=0.0, max_tokens=3)
    msgs = [m async for m in client.generate("long", OTHER_IDS, short)]
    assert sum(len(s.token_ids) for m in msgs for s in m.sequences) == 3


async def test_in_process_engine_death_ends_requests_with_an_error(
        model_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(async_llm_engine, "_FAIL_AT_STEP", 4)
    engine = AsyncLLMEngine.from_engine_args(
        engine_args("--model", str(model_path), "--mock-engine", "--mock-step-ms", "1"))
    client = InProcessEngineClient(engine, "test")
    await client.wait_ready()
    params = pb.SamplingParams(temperature=0.0, max_tokens=50, ignore_eos=True)
    msgs = [m async for m in client.generate("doomed", PROMPT_IDS, params)]
    assert 0 < sum(len(s.token_ids) for m in msgs for s in m.sequences) < 50
    assert msgs[-1].finished and "injected fault" in msgs[-1].error
    assert msgs[-1].sequences[0].finish_reason == pb.FINISH_REASON_ERROR
    await engine.dead.wait()
    assert not await client.health()
    # A request after the death is answered, not raised: an error response of its own.
    (after,) = [m async for m in client.generate("after", PROMPT_IDS, params)]
    assert after.finished and "engine loop has died" in after.error
    assert after.sequences[0].finish_reason == pb.FINISH_REASON_ERROR
    await client.close()


async def test_worker_gone_fails_every_running_request(model_path: Path) -> None:
    w = start_worker(model_path, *WORKER_FLAGS, "--mock-engine", "--mock-step-ms", "2")
    proc, address = w.proc, w.url
    try:
        client = GrpcEngineClient(address)
        await client.wait_ready()
        long = pb.SamplingParams(temperature=0.0, max_tokens=1500, ignore_eos=True)
        streams = [client.generate(f"r{i}", OTHER_IDS, long) for i in range(3)]
        for s in streams:
            await s.__anext__()
        proc.kill()
        for s in streams:
            with pytest.raises(EngineCallError) as err:
                async for _ in s:
                    pass
            assert err.value.code == "UNAVAILABLE"
        # No worker: a new request fails the same way, on its first message.
        with pytest.raises(EngineCallError) as err:
            await client.generate("later", OTHER_IDS, long).__anext__()
        assert err.value.code == "UNAVAILABLE"
        await client.close()
    finally:
        stop(w)
