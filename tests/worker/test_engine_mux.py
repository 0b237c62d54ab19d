"""EngineMux on a scripted GenerateStream: routing by id, refusals, early close, the call's end."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from hybridllm.proto import engine_pb2 as pb
from hybridllm.server.engine_mux import (
    STREAM_BUFFER,
    EngineCallError,
    EngineMux,
    OnEnd,
    OnResponse,
)


class ScriptedStream:
    """Records what the mux sends; the test plays the worker through respond() and end()."""

    def __init__(self, on_response: OnResponse, on_end: OnEnd) -> None:
        self.on_response, self.on_end = on_response, on_end
        self.submitted: list[str] = []
        self.embedded: list[str] = []
        self.aborted: list[str] = []
        self.closed = False

    def submit(self, req: pb.GenerateRequest) -> None:
        self.submitted.append(req.request_id)

    def submit_embed(self, req: pb.EmbedRequest) -> None:
        self.embedded.append(req.request_id)

    def abort(self, request_id: str) -> None:
        self.aborted.append(request_id)

    def close(self) -> None:
        self.closed = True

    def respond(self, *responses: pb.GenerateResponse) -> None:
        self.on_response(pb.GenerateStreamResponse(responses=responses))

    def end(self, code: str = "UNAVAILABLE") -> None:
        self.on_end(EngineCallError(code, "the call ended"))


def make_mux() -> tuple[EngineMux, list[ScriptedStream]]:
    streams: list[ScriptedStream] = []

    def open_stream(on_response: OnResponse, on_end: OnEnd) -> ScriptedStream:
        streams.append(ScriptedStream(on_response, on_end))
        return streams[-1]

    return EngineMux(open_stream), streams


def req(rid: str) -> pb.GenerateRequest:
    return pb.GenerateRequest(request_id=rid, prompt_token_ids=[1, 2, 3])


def delta(rid: str, token: int, finished: bool = False) -> pb.GenerateResponse:
    reason = pb.FINISH_REASON_LENGTH if finished else pb.FINISH_REASON_UNSPECIFIED
    return pb.GenerateResponse(request_id=rid, finished=finished, sequences=[
        pb.SequenceDelta(index=0, token_ids=[token], finish_reason=reason)])


async def test_responses_are_routed_by_request_id_and_nothing_is_aborted() -> None:
    mux, streams = make_mux()
    a, b = mux.generate(req("a")), mux.generate(req("b"))
    first_a = asyncio.ensure_future(a.__anext__())
    first_b = asyncio.ensure_future(b.__anext__())
    await asyncio.sleep(0)
    (stream,) = streams  # both on one call
    assert stream.submitted == ["a", "b"]
    stream.respond(delta("b", 20), delta("a", 10))
    stream.respond(delta("a", 11, finished=True), delta("b", 21), delta("gone", 99))
    stream.respond(delta("b", 22, finished=True))
    got_a = [await first_a, *[m async for m in a]]
    got_b = [await first_b, *[m async for m in b]]
    assert [m.sequences[0].token_ids[0] for m in got_a] == [10, 11]
    assert [m.sequences[0].token_ids[0] for m in got_b] == [20, 21, 22]
    assert got_a[-1].finished and got_b[-1].finished
    assert stream.aborted == []  # both ran to their end


async def test_refusal_raises_the_workers_code_on_the_first_message() -> None:
    mux, streams = make_mux()
    stream_iter = mux.generate(req("bad"))
    first = asyncio.ensure_future(stream_iter.__anext__())
    await asyncio.sleep(0)
    refusal = pb.RequestError(code=grpc.StatusCode.INVALID_ARGUMENT.value[0],
                              message="temperature must be >= 0")
    streams[0].respond(pb.GenerateResponse(request_id="bad", finished=True, rejected=refusal))
    with pytest.raises(EngineCallError) as err:
        await first
    assert (err.value.code, err.value.message) == ("INVALID_ARGUMENT", "temperature must be >= 0")
    assert streams[0].aborted == []


async def test_duplicate_id_is_refused_here_and_the_first_runs_on() -> None:
    mux, streams = make_mux()
    first = mux.generate(req("twice"))
    pending = asyncio.ensure_future(first.__anext__())
    await asyncio.sleep(0)
    with pytest.raises(EngineCallError) as err:
        await mux.generate(req("twice")).__anext__()
    assert err.value.code == "INVALID_ARGUMENT" and "already in use" in err.value.message
    assert streams[0].submitted == ["twice"]
    streams[0].respond(delta("twice", 7, finished=True))
    assert (await pending).sequences[0].token_ids == [7]


async def test_closing_early_aborts_once_and_later_responses_are_dropped() -> None:
    mux, streams = make_mux()
    it = mux.generate(req("r"))
    first = asyncio.ensure_future(it.__anext__())
    await asyncio.sleep(0)
    streams[0].respond(delta("r", 1))
    await first
    await it.aclose()
    assert streams[0].aborted == ["r"]
    streams[0].respond(delta("r", 2, finished=True))  # produced before the abort landed
    done = mux.generate(req("done"))
    first = asyncio.ensure_future(done.__anext__())
    await asyncio.sleep(0)
    streams[0].respond(delta("done", 3, finished=True))
    await first
    await done.aclose()  # after its last response: nothing to abort
    assert streams[0].aborted == ["r"]


async def test_the_calls_end_fails_every_running_request_and_the_next_opens_a_new_call() -> None:
    mux, streams = make_mux()
    its = [mux.generate(req(f"r{i}")) for i in range(3)]
    firsts = [asyncio.ensure_future(it.__anext__()) for it in its]
    await asyncio.sleep(0)
    streams[0].respond(delta("r0", 1, finished=True))
    streams[0].end("UNAVAILABLE")
    assert (await firsts[0]).finished
    for first in firsts[1:]:
        with pytest.raises(EngineCallError) as err:
            await first
        assert err.value.code == "UNAVAILABLE"
    assert streams[0].aborted == []  # the call is gone: nothing to abort on it
    after = mux.generate(req("after"))
    first = asyncio.ensure_future(after.__anext__())
    await asyncio.sleep(0)
    assert len(streams) == 2 and streams[1].submitted == ["after"]
    mux.close()
    assert streams[1].closed
    with pytest.raises(EngineCallError) as err:
        await first
    assert err.value.code == "CANCELLED"


def embed_req(rid: str) -> pb.EmbedRequest:
    return pb.EmbedRequest(request_id=rid, inputs=[pb.EmbedInput(token_ids=[1, 2])])


async def test_embed_is_one_response_and_cancelling_it_aborts_once() -> None:
    mux, streams = make_mux()
    answer = asyncio.ensure_future(mux.embed(embed_req("e")))
    await asyncio.sleep(0)
    assert streams[0].embedded == ["e"]
    vector = pb.Embedding(values=[0.5, 1.0])
    streams[0].respond(pb.GenerateResponse(request_id="e", finished=True, embeddings=[vector]))
    assert list((await answer).embeddings) == [vector]
    assert streams[0].aborted == []
    waiting = asyncio.ensure_future(mux.embed(embed_req("f")))
    await asyncio.sleep(0)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert streams[0].aborted == ["f"]
    refused = asyncio.ensure_future(mux.embed(embed_req("g")))
    await asyncio.sleep(0)
    streams[0].respond(pb.GenerateResponse(request_id="g", finished=True, rejected=pb.RequestError(
        code=grpc.StatusCode.FAILED_PRECONDITION.value[0], message="generative model")))
    with pytest.raises(EngineCallError) as e:
        await refused
    assert (e.value.code, e.value.message) == ("FAILED_PRECONDITION", "generative model")
    assert streams[0].aborted == ["f"]


async def test_a_request_nobody_reads_is_aborted_at_its_buffer() -> None:
    mux, streams = make_mux()
    a, b = mux.generate(req("a")), mux.generate(req("b"))
    first_a = asyncio.ensure_future(a.__anext__())
    first_b = asyncio.ensure_future(b.__anext__())
    await asyncio.sleep(0)
    (stream,) = streams
    steps = STREAM_BUFFER + 5
    got_b = []
    for t in range(steps):  # b is read every step, a never after its first
        stream.respond(delta("a", t), delta("b", t))
        got_b.append(await (first_b if t == 0 else b.__anext__()))
    assert [m.sequences[0].token_ids[0] for m in got_b] == list(range(steps))
    assert stream.aborted == ["a"]  # once, when its buffer was full
    got_a = [(await first_a).sequences[0].token_ids[0]]
    with pytest.raises(EngineCallError) as err:
        async for m in a:
            got_a.append(m.sequences[0].token_ids[0])
    assert got_a == list(range(STREAM_BUFFER + 1))  # the first was taken before the stall
    assert err.value.code == "CANCELLED"
    assert err.value.message == (
        f"request aborted: its client read none of its last {STREAM_BUFFER} responses")
    assert stream.aborted == ["a"]
    # b's final response still arrives after a full buffer.
    for t in range(STREAM_BUFFER):
        stream.respond(delta("b", t))
    stream.respond(delta("b", 7, finished=True))
    rest = [m async for m in b]
    assert len(rest) == STREAM_BUFFER + 1 and rest[-1].finished
    assert stream.aborted == ["a"]
