"""One HTTP request = one engine Generate stream per prompt (generate.rs): token deltas become
text deltas per sequence (incremental detokenization, stop strings, finish reasons), and the
engine call lives exactly as long as its consumer; closing it early aborts the request."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from hybridllm.entrypoints.engine_client import EngineCallError
from hybridllm.entrypoints.openai.errors import ApiError, from_engine, internal
from hybridllm.entrypoints.openai.state import AppState
from hybridllm.entrypoints.openai.validation import GenParams
from hybridllm.proto import engine_pb2 as pb
from hybridllm.text.detokenizer import IncrementalDetokenizer
from hybridllm.text.stop import StopChecker

logger = logging.getLogger("hybridllm.frontend")
_RUNNING = pb.FINISH_REASON_UNSPECIFIED
_REASONS = {pb.FINISH_REASON_LENGTH: "length", pb.FINISH_REASON_ABORT: "abort"}


@dataclass
class GenRequest:
    request_id: str
    prompt_ids: list[int]
    params: GenParams
    max_tokens: int


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


class _Seq:
    def __init__(self, prompt_ids: list[int], p: GenParams) -> None:
        self.detok = IncrementalDetokenizer(prompt_ids, p.decode)
        self.stop = StopChecker(p.stop, p.include_stop)
        self.finished = False
        self.engine_finished = False


class GenStream:
    def __init__(self, state: AppState, req: GenRequest, agen: Any, first: Any, start: float):
        self.state, self.req, self.agen, self.first = state, req, agen, first
        self.start, self.last_token = start, None
        self.seqs = [_Seq(req.prompt_ids, req.params) for _ in range(req.params.n)]

    def _process(self, resp: pb.GenerateResponse) -> list[Event]:
        st, tok = self.state, self.state.tokenizer
        events: list[Event] = [resp.prompt] if resp.HasField("prompt") else []
        now = time.monotonic()
        if any(d.token_ids for d in resp.sequences):
            if self.last_token is None:
                st.metrics.ttft.observe(now - self.start)
            else:
                st.metrics.itl.observe(now - self.last_token)
            self.last_token = now
        for d in resp.sequences:
            if d.index >= len(self.seqs):
                raise internal(f"engine sent unknown sequence index {d.index}")
            seq, ef = self.seqs[d.index], d.finish_reason
            seq.engine_finished |= ef != _RUNNING
            if seq.finished:
                continue
            if ef == pb.FINISH_REASON_ERROR:
                raise internal(resp.error or "engine error")
            ids = list(d.token_ids)
            stop_id = d.stop_token_id if d.HasField("stop_token_id") else None
            # The EOS / stop token that ended the sequence is not part of the text.
            drop_last = (ef == pb.FINISH_REASON_STOP and not self.req.params.include_stop
                         and stop_id is not None and ids and ids[-1] == stop_id)
            text = seq.detok.push(tok, ids[:-1] if drop_last else ids)
            if ef != _RUNNING:
                text += seq.detok.flush(tok)
            text, matched = seq.stop.push(text)
            finish = Finish("stop", matched) if matched is not None else None
            if finish is None and ef != _RUNNING:
                text += seq.stop.flush()
                if ef in _REASONS:
                    finish = Finish(_REASONS[ef])
                else:  # a stop token id is reported, EOS is not
                    eos = st.model_info.eos_token_ids
                    finish = Finish("stop", None if stop_id in eos else stop_id)
            if finish is not None:
                seq.finished = True
                st.metrics.request_success.labels(finish.reason).inc()
            events.append(Output(d.index, text, len(ids), list(d.logprobs), finish))
        return events

    async def events(self) -> AsyncIterator[Event]:
        try:
            msg = self.first
            while True:
                for e in self._process(msg):
                    yield e
                if all(s.finished for s in self.seqs):
                    break
                try:
                    msg = await self.agen.__anext__()
                except StopAsyncIteration:
                    raise internal("the engine stream ended early") from None
                except EngineCallError as e:
                    raise from_engine(e.code, e.message) from None
        finally:
            await self.close()

    async def close(self) -> None:
        if self.agen is None:
            return
        agen, self.agen = self.agen, None
        self.state.metrics.in_flight.dec()
        self.state.metrics.e2e.observe(time.monotonic() - self.start)
        await agen.aclose()
        # Stop strings end a request the engine still runs: abort it explicitly.
        if not all(s.engine_finished for s in self.seqs):
            asyncio.ensure_future(self.state.engine.abort([self.req.request_id]))


async def generate(state: AppState, req: GenRequest) -> GenStream:
    """Starts the call and waits for its first message, so a rejected request is still an
    HTTP error rather than an error inside a 200 stream."""
    start = time.monotonic()
    state.metrics.in_flight.inc()
    if not state.options.disable_log_requests:
        shown = req.prompt_ids[: state.options.max_log_len]
        logger.info("generate request_id=%s prompt_tokens=%d max_tokens=%d n=%d prompt_ids=%s",
                    req.request_id, len(req.prompt_ids), req.max_tokens, req.params.n, shown)
    sampling = pb.SamplingParams()
    sampling.CopyFrom(req.params.sampling)
    sampling.max_tokens = req.max_tokens
    agen = state.engine.generate(req.request_id, req.prompt_ids, sampling)
    try:
        first = await agen.__anext__()
    except BaseException as e:
        state.metrics.in_flight.dec()
        state.metrics.e2e.observe(time.monotonic() - start)
        await agen.aclose()
        if isinstance(e, StopAsyncIteration):
            raise internal("the engine closed the stream without output") from None
        if isinstance(e, EngineCallError):
            raise from_engine(e.code, e.message) from None
        raise
    return GenStream(state, req, agen, first, start)


async def generate_many(state: AppState, reqs: list[GenRequest]) -> AsyncIterator[
        tuple[int, Event]]:
    """Starts one call per prompt (all must start) and merges their events by prompt index."""
    streams: list[GenStream] = []
    try:
        for r in reqs:
            streams.append(await generate(state, r))
    except BaseException:
        for s in streams:
            await s.close()
        raise
    return _merge(streams)


async def _merge(streams: list[GenStream]) -> AsyncIterator[tuple[int, Event]]:
    if len(streams) == 1:
        async for e in streams[0].events():
            yield 0, e
        return
    queue: asyncio.Queue[tuple[int, Any]] = asyncio.Queue()
    done = object()

    async def pump(i: int, s: GenStream) -> None:
        try:
            async for e in s.events():
                await queue.put((i, e))
        except ApiError as e:
            await queue.put((i, e))
        finally:
            await queue.put((i, done))

    tasks = [asyncio.ensure_future(pump(i, s)) for i, s in enumerate(streams)]
    try:
        remaining = len(tasks)
        while remaining:
            i, e = await queue.get()
            if e is done:
                remaining -= 1
            elif isinstance(e, ApiError):
                raise e
            else:
                yield i, e
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for s in streams:
            await s.close()


async def tokenize(state: AppState, text: str, add_special: bool) -> list[int]:
    # Off the event loop: 100k-token prompts take milliseconds.
    return await asyncio.to_thread(state.tokenizer.encode, text, add_special)
