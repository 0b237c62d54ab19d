"""The engine worker over gRPC: streamed token ids, concurrency, cancel, bad input, faults.

Requests go as the frontends send them: all on one GenerateStream call, through EngineMux.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import signal
from collections.abc import AsyncIterator

import pytest

from hybridllm import LLM, SamplingParams
from hybridllm.proto import engine_pb2 as pb
from hybridllm.server.engine_client import GrpcEngineClient
from hybridllm.server.engine_mux import EngineCallError
from hybridllm.server.proto_convert import sampling_params_to_proto
from tests.launch import start_worker, stop
from tests.worker.conftest import WORKER_FLAGS

PROMPT_IDS = [504, 3575, 282, 4649, 314]  # "The capital of France is"


def generate(client: GrpcEngineClient, ids: list[int], params: SamplingParams | pb.SamplingParams,
             rid: str) -> AsyncIterator[pb.GenerateResponse]:
    sp = params if isinstance(params, pb.SamplingParams) else sampling_params_to_proto(params)
    return client.mux.generate(
        pb.GenerateRequest(request_id=rid, prompt_token_ids=ids, sampling_params=sp))


async def collect(client: GrpcEngineClient, ids: list[int], params: SamplingParams, rid: str):
    messages = [m async for m in generate(client, ids, params, rid)]
    tokens: dict[int, list[int]] = {}
    finish: dict[int, int] = {}
    for m in messages:
        for s in m.sequences:
            tokens.setdefault(s.index, []).extend(s.token_ids)
            if s.finish_reason:
                finish[s.index] = s.finish_reason
    return messages, tokens, finish


async def test_stream_equals_offline_generate(worker: str, model_path) -> None:
    params = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True, logprobs=2)
    client = GrpcEngineClient(worker)
    await client.start()
    messages, tokens, finish = await collect(client, PROMPT_IDS, params, "parity")
    offline = LLM(model=str(model_path), max_model_len=2048).generate([PROMPT_IDS], params)[0]
    assert tokens[0] == offline.outputs[0].token_ids
    assert finish == {0: pb.FINISH_REASON_LENGTH}
    assert messages[0].prompt.prompt_tokens == len(PROMPT_IDS)
    assert not messages[1].HasField("prompt")
    # Streamed: one token per message (one step each), logprobs alongside each token.
    assert len(messages) == 24
    lps = [lp for m in messages for s in m.sequences for lp in s.logprobs]
    assert [lp.token.token_id for lp in lps] == tokens[0]
    assert all(len(lp.top) == 2 and lp.top[0].rank == 1 for lp in lps)
    expected = [e[t].logprob for t, e in zip(offline.outputs[0].token_ids,
                                            offline.outputs[0].logprobs)]
    assert all(math.isclose(lp.token.logprob, e, abs_tol=1e-5) for lp, e in zip(lps, expected))
    await client.close()


async def test_eos_and_stop_token_reported(worker: str) -> None:
    client = GrpcEngineClient(worker)
    await client.start()
    chat = [1, 9690, 198, 2683, 359, 253, 5356, 5646, 11173, 3365, 3511, 308, 34519, 28, 7018,
            411, 407, 19712, 8182, 2, 198, 1, 4093, 198, 1780, 314, 260, 3575, 282, 4649, 47,
            2, 198, 1, 520, 9531, 198]
    _, tokens, finish = await collect(client, chat, SamplingParams(temperature=0, max_tokens=40),
                                      "eos")
    assert tokens[0][-1] == 2 and finish[0] == pb.FINISH_REASON_STOP
    await client.close()


async def test_32_concurrent_streams_and_cancel_one(worker: str) -> None:
    client = GrpcEngineClient(worker)
    await client.start()
    params = SamplingParams(temperature=0, max_tokens=16, ignore_eos=True)
    _, alone, _ = await collect(client, PROMPT_IDS, params, "alone")

    long_params = SamplingParams(temperature=0, max_tokens=1000, ignore_eos=True)
    cancelled = asyncio.Event()

    async def cancel_midway() -> int:
        n = 0
        stream = generate(client, PROMPT_IDS, long_params, "victim")
        async with contextlib.aclosing(stream):
            async for m in stream:
                n += sum(len(s.token_ids) for s in m.sequences)
                if n >= 5:
                    break  # closing the stream aborts the request
        cancelled.set()
        return n

    tasks = [collect(client, PROMPT_IDS, params, f"c{i}") for i in range(32)]
    results = await asyncio.gather(cancel_midway(), *tasks)
    assert results[0] >= 5
    for _, tokens, finish in results[1:]:
        assert tokens[0] == alone[0] and finish[0] == pb.FINISH_REASON_LENGTH
    for _ in range(50):  # the abort lands at the next engine step
        load = await client.load()
        if load.num_running == 0 and load.num_waiting == 0:
            break
        await asyncio.sleep(0.1)
    assert (load.num_running, load.num_waiting) == (0, 0)
    assert load.num_free_blocks == load.num_total_blocks  # every block back
    await client.close()


@pytest.mark.parametrize(
    "ids, sampling, field",
    [
        ([1, 2, 10**6], pb.SamplingParams(), "out of vocabulary"),
        ([1] * 2048, pb.SamplingParams(), "maximum model length"),
        ([], pb.SamplingParams(), "at least one token"),
        (PROMPT_IDS, pb.SamplingParams(temperature=-1.0), "temperature"),
        (PROMPT_IDS, pb.SamplingParams(top_p=0.0), "top_p"),
        (PROMPT_IDS, pb.SamplingParams(n=0), "n must be"),
        (PROMPT_IDS, pb.SamplingParams(logprobs=50), "logprobs"),
    ],
)
async def test_bad_requests_invalid_argument(worker: str, ids, sampling, field) -> None:
    client = GrpcEngineClient(worker)
    await client.start()
    stream = generate(client, ids, sampling, "bad")
    with pytest.raises(EngineCallError) as err:
        await stream.__anext__()  # refused at once: the first message is the refusal
    assert err.value.code == "INVALID_ARGUMENT"
    assert field in err.value.message
    _, tokens, _ = await collect(client, PROMPT_IDS, SamplingParams(temperature=0, max_tokens=3),
                                 "after-bad")
    assert len(tokens[0]) == 3
    await client.close()


async def test_unset_fields_are_engine_defaults(worker: str) -> None:
    """proto3 zeros must not leak: an empty SamplingParams samples at temperature 1."""
    client = GrpcEngineClient(worker)
    await client.start()
    greedy = pb.SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)
    default = pb.SamplingParams(max_tokens=12, ignore_eos=True, seed=5)
    outs = []
    for rid, sp in (("g", greedy), ("d", default)):
        stream = generate(client, PROMPT_IDS, sp, rid)
        outs.append([t async for m in stream for s in m.sequences for t in s.token_ids])
    assert outs[0] != outs[1]
    info = await client.model_info()
    assert info.max_model_len == 2048 and info.vocab_size == 49152
    assert list(info.eos_token_ids) == [2] and info.tokenizer_path.endswith("tokenizer.json")
    assert "<|im_start|>" in info.chat_template and info.kind == pb.ModelInfo.GENERATE
    await client.close()


async def test_engine_fault_turns_unhealthy_and_exits_nonzero(model_path) -> None:
    w = start_worker(model_path, *WORKER_FLAGS, env={"HYBRIDLLM_TEST_FAIL_AT_STEP": "3"})
    proc, address = w.proc, w.url
    try:
        client = GrpcEngineClient(address)
        await client.start()
        msgs = [m async for m in generate(
            client, PROMPT_IDS, SamplingParams(temperature=0, max_tokens=50), "doomed")]
        last = msgs[-1]
        assert last.sequences[0].finish_reason == pb.FINISH_REASON_ERROR
        assert "injected fault" in last.error
        assert not await client.health(timeout=1.0)
        await client.close()
        assert await asyncio.to_thread(proc.wait, 30) != 0
    finally:
        stop(w)


async def test_sigterm_lets_inflight_finish(model_path) -> None:
    w = start_worker(model_path, *WORKER_FLAGS, "--shutdown-timeout", "30")
    proc, address = w.proc, w.url
    try:
        client = GrpcEngineClient(address)
        await client.start()
        params = SamplingParams(temperature=0, max_tokens=20, ignore_eos=True)
        stream = generate(client, PROMPT_IDS, params, "inflight")
        first = await stream.__anext__()
        proc.send_signal(signal.SIGTERM)
        rest = [m async for m in stream]
        tokens = [t for m in [first, *rest] for s in m.sequences for t in s.token_ids]
        assert len(tokens) == 20
        assert rest[-1].sequences[0].finish_reason == pb.FINISH_REASON_LENGTH
        await client.close()
        assert await asyncio.to_thread(proc.wait, 30) == 0
    finally:
        stop(w)
