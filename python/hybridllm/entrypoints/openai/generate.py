"""One HTTP request = one engine request per prompt (generate.rs). The core's EngineEvents
reads each worker message (incremental detokenization, stop strings, finish reasons, the
engine's errors, the per-request metrics), and the engine call lives exactly as long as its
consumer; closing it early aborts the request. `respond` turns a request's events into the
core's response (SSE frames or one body)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from hybridllm import _api
from hybridllm.entrypoints.openai.disconnect import unless_disconnected
from hybridllm.entrypoints.openai.errors import from_engine
from hybridllm.entrypoints.openai.sse import SSEResponse
from hybridllm.entrypoints.openai.state import AppState
from hybridllm.proto import engine_pb2 as pb
from hybridllm.server.engine_client import EngineCallError

logger = logging.getLogger("hybridllm.frontend")
Steps = AsyncIterator[tuple[int, _api.Step]]  # each engine step's events, by prompt index


class GenStream:
    """One started engine call: its steps' events; closing it ends the call (and aborts the
    request if the engine still runs it)."""

    def __init__(self, state: AppState, req: _api.EngineRequest) -> None:
        if not state.options.disable_log_requests:
            logger.info("generate request_id=%s prompt_tokens=%d max_tokens=%d n=%d "
                        "prompt_ids=%s", req.request_id, len(req.prompt_ids), req.max_tokens,
                        req.n, req.prompt_ids[: state.options.max_log_len])
        self.state, self.req, self.start = state, req, time.monotonic()
        self.events = _api.EngineEvents(state.api, state.metrics, req)
        self.cost = len(req.prompt_ids) + req.n * req.max_tokens  # the router's outstanding tokens
        state.metrics.request_started(self.cost)
        sampling = pb.SamplingParams(**req.sampling())
        b = req.beam()
        beam = pb.BeamSearchParams(**b) if b is not None else None
        self.agen: Any = state.engine.generate(req.request_id, req.prompt_ids, sampling, beam,
                                               req.priority)
        self.first: pb.GenerateResponse | None = None

    async def next(self, ended: str) -> pb.GenerateResponse:
        try:
            return await self.agen.__anext__()
        except StopAsyncIteration:
            raise _api.error(500, ended) from None
        except EngineCallError as e:
            raise from_engine(e) from None

    async def steps(self) -> AsyncIterator[_api.Step]:
        try:
            msg = self.first
            while True:
                yield self.events.process(msg)
                if self.events.all_finished:
                    break
                msg = await self.next("the engine stream ended early")
        finally:
            await self.close()

    async def close(self) -> None:
        if self.agen is None:
            return
        agen, self.agen = self.agen, None
        self.state.metrics.request_ended(self.cost, time.monotonic() - self.start)
        await agen.aclose()
        # Stop strings end a request the engine still runs: abort it explicitly (a request
        # that never started has nothing to abort).
        if self.first is not None and not self.events.engine_done:
            asyncio.ensure_future(self.state.engine.abort([self.req.request_id]))


async def generate_many(state: AppState, reqs: list[_api.EngineRequest]) -> Steps:
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
            await s.close()
        raise
    return _merge(streams)


async def _merge(streams: list[GenStream]) -> Steps:
    """Each stream's next step is awaited at once; the first to come is passed on."""
    gens = [s.steps() for s in streams]
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


async def respond(request: Request, state: AppState, gens: list[_api.EngineRequest],
                  resp: _api.Response) -> Response:
    """Runs the engine requests and answers with the core's response of their events."""
    events = await unless_disconnected(request, generate_many(state, gens))
    if resp.stream:
        return SSEResponse(_frames(resp, events))
    await feed_all(request, resp, events)
    headers = await _orca(request, state)
    return Response(resp.body(), media_type="application/json", headers=headers)


async def _orca(request: Request, state: AppState) -> dict[str, str] | None:
    """vLLM's ORCA load report, when the request asks for one (metrics.rs)."""
    if (fmt := request.headers.get("endpoint-load-metrics-format")) is None:
        return None
    state.metrics.apply_load(await state.engine.load())
    value = state.metrics.orca_header(fmt)
    return None if value is None else {"endpoint-load-metrics": value}


async def feed_all(request: Request, resp: _api.Response | _api.ResponsesResponse,
                   events: Steps) -> None:
    """A response not streamed: every event into it, cancelled if the client hangs up."""

    async def run() -> None:
        async for p, step in events:
            resp.feed_step(p, step)

    await unless_disconnected(request, run())


async def _frames(resp: _api.Response, events: Steps) -> AsyncIterator[bytes]:
    for f in resp.opening():
        yield f
    try:
        async for p, step in events:
            for f in resp.feed_step(p, step):
                yield f
    finally:
        await events.aclose()  # type: ignore[attr-defined]
    last = resp.closing()
    if last is not None:
        yield last
