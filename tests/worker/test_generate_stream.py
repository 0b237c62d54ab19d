"""GenerateStream: many requests on one call, per-step batches, rejects, aborts, cancel."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc

from hybridllm import SamplingParams
from hybridllm.proto import engine_pb2 as pb
from hybridllm.server.engine_client import GrpcEngineClient
from hybridllm.server.proto_convert import sampling_params_to_proto
from tests.launch import start_worker, stop
from tests.worker.conftest import WORKER_FLAGS
from tests.worker.test_grpc_worker import PROMPT_IDS, collect

_END = object()


class StreamCall:
    """A GenerateStream call fed from a queue, so a test can send while it reads."""

    def __init__(self, client: GrpcEngineClient) -> None:
        self.outbox: asyncio.Queue[object] = asyncio.Queue()
        self.call = client.stub.GenerateStream(self._requests())

    async def _requests(self) -> AsyncIterator[pb.GenerateStreamRequest]:
        while (msg := await self.outbox.get()) is not _END:
            yield msg

    def generate(self, rid: str, ids: list[int],
                 params: SamplingParams | pb.SamplingParams) -> None:
        sp = params if isinstance(params, pb.SamplingParams) else sampling_params_to_proto(params)
        req = pb.GenerateRequest(request_id=rid, prompt_token_ids=ids, sampling_params=sp)
        self.outbox.put_nowait(pb.GenerateStreamRequest(generate=[req]))

    def abort(self, rid: str) -> None:
        self.outbox.put_nowait(pb.GenerateStreamRequest(abort=[rid]))

    def half_close(self) -> None:
        self.outbox.put_nowait(_END)

    async def read(self) -> list[pb.GenerateStreamResponse]:
        return [batch async for batch in self.call]


def tokens_of(responses: list[pb.GenerateResponse]) -> list[int]:
    return [t for r in responses for s in r.sequences for t in s.token_ids]


async def wait_idle(client: GrpcEngineClient) -> pb.LoadResponse:
    for _ in range(50):  # an abort lands at the next engine step
        load = await client.load()
        if load.num_running == 0 and load.num_waiting == 0:
            break
        await asyncio.sleep(0.1)
    return load


async def test_many_requests_on_one_call_equal_their_own_calls(worker: str) -> None:
    client = GrpcEngineClient(worker)
    await client.start()
    params = {f"r{i}": SamplingParams(temperature=0, max_tokens=8 + i, ignore_eos=True)
              for i in range(4)}
    alone = {rid: (await collect(client, PROMPT_IDS[: 3 + i], p, f"alone-{rid}"))[1][0]
             for i, (rid, p) in enumerate(params.items())}
    call = StreamCall(client)
    for i, (rid, p) in enumerate(params.items()):
        call.generate(rid, PROMPT_IDS[: 3 + i], p)
    call.generate("bad", [1, 2, 10**6], SamplingParams(max_tokens=4))
    call.generate("bad-temp", PROMPT_IDS, pb.SamplingParams(temperature=-1.0))
    call.half_close()  # the call still ends only after the last request has finished
    batches = await call.read()
    by_id: dict[str, list[pb.GenerateResponse]] = {}
    for batch in batches:
        for r in batch.responses:
            by_id.setdefault(r.request_id, []).append(r)
    assert set(by_id) == {*params, "bad", "bad-temp"}
    for rid, p in params.items():
        rs = by_id[rid]
        assert tokens_of(rs) == alone[rid]
        assert [len(tokens_of([r])) for r in rs] == [1] * p.max_tokens  # one step per message
        assert [r.finished for r in rs] == [False] * (p.max_tokens - 1) + [True]
        assert rs[0].prompt.prompt_tokens == len(PROMPT_IDS[: 3 + int(rid[1:])])
        assert rs[-1].sequences[0].finish_reason == pb.FINISH_REASON_LENGTH
    for rid, field in (("bad", "out of vocabulary"), ("bad-temp", "temperature")):
        (r,) = by_id[rid]
        assert r.finished and r.rejected.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
        assert field in r.rejected.message
    # Requests running together share messages: far fewer messages than responses.
    assert len(batches) < sum(len(rs) for rs in by_id.values()) / 2
    await client.close()


async def test_a_refusal_names_the_field(worker: str) -> None:
    """RequestError.param: the sampling or request field the engine refuses (the frontends'
    error `param`); empty where the refusal is about no field in particular."""
    client = GrpcEngineClient(worker)
    await client.start()
    call = StreamCall(client)
    call.generate("min", PROMPT_IDS, pb.SamplingParams(max_tokens=2, min_tokens=3))
    call.generate("bias", PROMPT_IDS, pb.SamplingParams(max_tokens=2, logit_bias={10**6: 1.0}))
    call.generate("prompt", [1, 2, 10**6], pb.SamplingParams(max_tokens=2))
    call.half_close()
    rejected = {r.request_id: r.rejected for b in await call.read() for r in b.responses}
    assert {rid: e.param for rid, e in rejected.items()} == \
        {"min": "min_tokens", "bias": "logit_bias", "prompt": ""}
    assert rejected["min"].message == "min_tokens must be in [0, max_tokens], got 3."
    assert rejected["bias"].message.startswith("token_id 1000000 in logit_bias is out of "
                                               "vocabulary (size ")
    assert {e.code for e in rejected.values()} == {grpc.StatusCode.INVALID_ARGUMENT.value[0]}
    await client.close()


async def test_abort_one_then_cancel_the_call_frees_everything(worker: str) -> None:
    client = GrpcEngineClient(worker)
    await client.start()
    long = SamplingParams(temperature=0, max_tokens=1000, ignore_eos=True)
    call = StreamCall(client)
    for i in range(3):
        call.generate(f"long{i}", PROMPT_IDS, long)
    seen: dict[str, int] = {}
    async for batch in call.call:
        for r in batch.responses:
            seen[r.request_id] = seen.get(r.request_id, 0) + len(tokens_of([r]))
        if seen.get("long0", 0) >= 5 and "abort-sent" not in seen:
            call.abort("long0")
            seen["abort-sent"] = seen["long0"]
        if seen.get("long1", 0) >= seen.get("abort-sent", 10**9) + 10:
            break
    # long0 got nothing after its abort was applied (at most the step already running).
    assert seen["long0"] <= seen["abort-sent"] + 1
    call.call.cancel()  # the frontend went away: the worker aborts what still runs
    load = await wait_idle(client)
    assert (load.num_running, load.num_waiting) == (0, 0)
    assert load.num_free_blocks == load.num_total_blocks
    # The worker serves the next call as usual.
    call = StreamCall(client)
    call.generate("after", PROMPT_IDS, SamplingParams(temperature=0, max_tokens=3))
    call.half_close()
    assert len(tokens_of([r for b in await call.read() for r in b.responses])) == 3
    await client.close()


async def test_duplicate_id_on_a_call_is_refused_and_the_first_runs_on(worker: str) -> None:
    client = GrpcEngineClient(worker)
    await client.start()
    call = StreamCall(client)
    params = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)
    call.generate("twice", PROMPT_IDS, params)
    call.generate("twice", PROMPT_IDS, params)
    call.half_close()
    responses = [r for b in await call.read() for r in b.responses]
    refused = [r for r in responses if r.HasField("rejected")]
    assert len(refused) == 1 and "already in use" in refused[0].rejected.message
    served = [r for r in responses if not r.HasField("rejected")]
    assert len(tokens_of(served)) == 6 and served[-1].finished
    await client.close()


async def test_engine_fault_ends_every_request_on_the_call(model_path) -> None:
    w = start_worker(model_path, *WORKER_FLAGS, env={"HYBRIDLLM_TEST_FAIL_AT_STEP": "4"})
    proc, address = w.proc, w.url
    try:
        client = GrpcEngineClient(address)
        await client.start()
        call = StreamCall(client)
        for i in range(3):
            call.generate(f"doomed{i}", PROMPT_IDS[: 4 + i],
                          SamplingParams(temperature=0, max_tokens=50, ignore_eos=True))
        call.half_close()
        by_id: dict[str, list[pb.GenerateResponse]] = {}
        for batch in await call.read():
            for r in batch.responses:
                by_id.setdefault(r.request_id, []).append(r)
        assert set(by_id) == {"doomed0", "doomed1", "doomed2"}
        for rs in by_id.values():
            last = rs[-1]
            assert last.finished and "injected fault" in last.error
            assert last.sequences[0].finish_reason == pb.FINISH_REASON_ERROR
            assert 0 < len(tokens_of(rs)) < 50
        await client.close()
        assert await asyncio.to_thread(proc.wait, 30) != 0
    finally:
        stop(w)


def test_step_message_leads_with_first_tokens() -> None:
    """The frontend handles a message's responses in order: streams waiting for their first
    token go first, the others keep the engine's order."""
    from hybridllm.outputs import CompletionOutput, RequestOutput
    from hybridllm.server.generate_stream import GenerateStreamCall
    from hybridllm.server.responses import ResponseBuilder

    call = GenerateStreamCall(engine=None, draining=False)  # type: ignore[arg-type]
    params = SamplingParams(max_tokens=4)
    for rid in "abcde":
        call.active[rid] = ResponseBuilder(rid, params)
    for rid in "ace":
        call.active[rid].first = False  # these already sent their first token
    items = [(rid, RequestOutput(rid, None, [1, 2, 3], None,
                                 [CompletionOutput(0, "", [7], None, None)], False))
             for rid in "abcde"]
    push = call.on_step(items)
    assert push is not None
    push()
    msg = pb.GenerateStreamResponse.FromString(call._pending[0])
    assert [r.request_id for r in msg.responses] == ["b", "d", "a", "c", "e"]
    assert [r.HasField("prompt") for r in msg.responses] == [True, True, False, False, False]
    assert [list(r.sequences[0].token_ids) for r in msg.responses] == [[7]] * 5
