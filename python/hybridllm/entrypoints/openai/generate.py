"""One HTTP request = one engine request per prompt (generate.rs): token deltas become
text deltas per sequence (the core's SequenceText: incremental detokenization, stop strings,
finish reasons), and the engine call lives exactly as long as its consumer; closing it early
aborts the request. `respond` turns a request's events into the core's response (SSE frames
or one body)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from hybridllm import _api
from hybridllm._api import SequenceText
from hybridllm.entrypoints.engine_client import EngineCallError
from hybridllm.entrypoints.openai.disconnect import unless_disconnected
from hybridllm.entrypoints.openai.errors import from_engine, internal
from hybridllm.entrypoints.openai.sse import SSEResponse
from hybridllm.entrypoints.openai.state import AppState
from hybridllm.proto import engine_pb2 as pb

logger = logging.getLogger("hybridllm.frontend")
_RUNNING = pb.FINISH_REASON_UNSPECIFIED
# The engine's word on a sequence, as the core's SequenceText takes it.
_ENGINE_FINISH = {_RUNNING: None, pb.FINISH_REASON_STOP: "stop",
                  pb.FINISH_REASON_LENGTH: "length", pb.FINISH_REASON_ABORT: "abort"}


@dataclass
class Finish:
    reason: str
    stop_reason: Any = None  # the matched stop string, or a stop token id (None for EOS)


@dataclass
class Output:
    index: int
    text: str
    num_tokens: int
    logprobs: list[pb.PositionLogprobs]
    finish: Finish | None


Event = pb.PromptInfo | Output
Events = AsyncIterator[tuple[int, Event]]


class GenStream:
    """One started engine call: its events; closing it ends the call (and aborts the request
    if the engine still runs it)."""

    def __init__(self, state: AppState, req: _api.EngineRequest) -> None:
        n = req.n
        if not state.options.disable_log_requests:
            logger.info("generate request_id=%s prompt_tokens=%d max_tokens=%d n=%d "
                        "prompt_ids=%s", req.request_id, len(req.prompt_ids), req.max_tokens, n,
                        req.prompt_ids[: state.options.max_log_len])
        self.state, self.req, self.start, self.last_token = state, req, time.monotonic(), None
        self.texts = [SequenceText(req.prompt_ids, req.stop, req.include_stop_str_in_output,
                                   req.skip_special_tokens, req.spaces_between_special_tokens)
                      for _ in range(n)]
        self.finished, self.engine_finished = [False] * n, [False] * n
        self.eos = list(state.model_info.eos_token_ids)
        state.metrics.in_flight.inc()
        self.cost = len(req.prompt_ids) + n * req.max_tokens  # the router's outstanding tokens
        state.metrics.worker_requests.inc()
        state.metrics.worker_outstanding_tokens.inc(self.cost)
        sampling = pb.SamplingParams(**req.sampling())
        b = req.beam()
        beam = pb.BeamSearchParams(**b) if b is not None else None
        self.agen: Any = state.engine.generate(req.request_id, req.prompt_ids, sampling, beam)
        self.first: pb.GenerateResponse | None = None

    async def next(self, ended: str) -> pb.GenerateResponse:
        try:
            return await self.agen.__anext__()
        except StopAsyncIteration:
            raise internal(ended) from None
        except EngineCallError as e:
            raise from_engine(e.code, e.message, e.param) from None

    def _process(self, resp: pb.GenerateResponse) -> list[Event]:
        st, tok = self.state, self.state.tokenizer
        events: list[Event] = []
        if resp.HasField("prompt"):
            st.metrics.queue_time.observe(resp.prompt.queue_time_s)
            events.append(resp.prompt)
        now = time.monotonic()
        if any(d.token_ids for d in resp.sequences):
            if self.last_token is None:
                st.metrics.ttft.observe(now - self.start)
            else:
                st.metrics.itl.observe(now - self.last_token)
            self.last_token = now
        for d in resp.sequences:
            i, ef = d.index, d.finish_reason
            if i >= len(self.texts):
                raise internal(f"engine sent unknown sequence index {i}")
            self.engine_finished[i] |= ef != _RUNNING
            if self.finished[i]:
                continue
            if ef == pb.FINISH_REASON_ERROR:
                raise internal(resp.error or "engine error")
            stop_id = d.stop_token_id if d.HasField("stop_token_id") else None
            text, reason, stop_reason = self.texts[i].push(
                tok, d.token_ids, _ENGINE_FINISH.get(ef, "stop"), stop_id, self.eos)
            finish = Finish(reason, stop_reason) if reason is not None else None
            if finish is not None:
                self.finished[i] = True
                st.metrics.request_success.labels(finish.reason).inc()
            events.append(Output(i, text, len(d.token_ids), list(d.logprobs), finish))
        return events

    async def events(self) -> AsyncIterator[Event]:
        try:
            msg = self.first
            while True:
                for e in self._process(msg):
                    yield e
                if all(self.finished):
                    break
                msg = await self.next("the engine stream ended early")
        finally:
            await self.close()

    async def close(self) -> None:
        if self.agen is None:
            return
        agen, self.agen = self.agen, None
        self.state.metrics.in_flight.dec()
        self.state.metrics.worker_outstanding_tokens.dec(self.cost)
        self.state.metrics.e2e.observe(time.monotonic() - self.start)
        await agen.aclose()
        # Stop strings end a request the engine still runs: abort it explicitly.
        if not all(self.engine_finished):
            asyncio.ensure_future(self.state.engine.abort([self.req.request_id]))


async def generate_many(state: AppState, reqs: list[_api.EngineRequest]) -> Events:
    """Starts one call per prompt and waits for each one's first message, so a rejected
    request is still an HTTP error rather than an error inside a 200 stream; then merges their
    events by prompt index."""
    streams: list[GenStream] = []
    try:
        for r in reqs:
            s = GenStream(state, r)
            streams.append(s)
            s.first = await s.next("the engine closed the stream without output")
    except BaseException:
        for s in streams:
            if s.first is None:  # it never started: nothing to abort
                s.engine_finished = [True] * len(s.engine_finished)
            await s.close()
        raise
    return _merge(streams)


async def _merge(streams: list[GenStream]) -> Events:
    """Each stream's next event is awaited at once; the first to come is passed on."""
    gens = [s.events() for s in streams]
    pending = {asyncio.ensure_future(anext(g)): i for i, g in enumerate(gens)}
    try:
        while pending:
            done, _ = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for t in done:
                i = pending.pop(t)
                try:
                    e = t.result()
                except StopAsyncIteration:
                    continue
                pending[asyncio.ensure_future(anext(gens[i]))] = i
                yield i, e
    finally:
        for t in pending:
            t.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        for s in streams:
            await s.close()


async def tokenize(state: AppState, text: str, add_special: bool) -> list[int]:
    # Off the event loop: 100k-token prompts take milliseconds.
    return await asyncio.to_thread(state.tokenizer.encode, text, add_special)


def feed(resp: _api.Response | _api.ResponsesResponse, p: int, ev: Event) -> list[bytes] | None:
    """One engine event into the core's response (its frames, if it streams them)."""
    if isinstance(ev, Output):
        f = ev.finish
        return resp.output(p, ev.index, ev.text, ev.num_tokens, ev.logprobs,
                           f.reason if f else None, f.stop_reason if f else None)
    return resp.prompt(p, ev.prompt_tokens, ev.cached_tokens, ev.prompt_logprobs)


async def respond(request: Request, state: AppState, gens: list[_api.EngineRequest],
                  resp: _api.Response) -> Response:
    """Runs the engine requests and answers with the core's response of their events."""
    events = await unless_disconnected(request, generate_many(state, gens))
    if resp.stream:
        return SSEResponse(_frames(resp, events))
    await feed_all(request, resp, events)
    return Response(resp.body(), media_type="application/json")


async def feed_all(request: Request, resp: _api.Response | _api.ResponsesResponse,
                   events: Events) -> None:
    """A response not streamed: every event into it, cancelled if the client hangs up."""

    async def run() -> None:
        async for p, ev in events:
            feed(resp, p, ev)

    await unless_disconnected(request, run())


async def _frames(resp: _api.Response, events: Events) -> AsyncIterator[bytes]:
    for f in resp.opening():
        yield f
    try:
        async for p, ev in events:
            for f in feed(resp, p, ev) or []:
                yield f
    finally:
        await events.aclose()  # type: ignore[attr-defined]
    last = resp.closing()
    if last is not None:
        yield last
