"""One GenerateStream call: many requests in, one message per engine step out.

The engine loop hands each step's outputs to the requests' sinks one after another without
yielding to the event loop, so by the time the writer below runs, the whole step is pending
and goes out as one message. A slow reader gets several steps in one message, still one
response per request per step, so the frontend sees the same deltas either way.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import grpc

from hybridllm.engine.async_llm_engine import AsyncLLMEngine, EngineDeadError
from hybridllm.outputs import RequestOutput
from hybridllm.proto import engine_pb2 as pb
from hybridllm.worker.proto_convert import sampling_params_from_proto
from hybridllm.worker.responses import ResponseBuilder, rejected

logger = logging.getLogger("hybridllm.worker")


class GenerateStreamCall:
    def __init__(self, engine: AsyncLLMEngine, draining: bool) -> None:
        self.engine = engine
        self.draining = draining  # refuse new requests; end the call once the last finishes
        self.active: dict[str, ResponseBuilder] = {}
        self._pending: list[pb.GenerateResponse] = []
        self._ready = asyncio.Event()
        self._reader_done = False

    def drain(self) -> None:
        self.draining = True
        self._ready.set()

    def _push(self, resp: pb.GenerateResponse) -> None:
        self._pending.append(resp)
        self._ready.set()

    def submit(self, req: pb.GenerateRequest) -> None:
        rid = req.request_id
        if self.draining:
            self._push(rejected(rid, grpc.StatusCode.UNAVAILABLE, "the engine is shutting down"))
            return
        try:
            params = sampling_params_from_proto(req.sampling_params)
            builder = ResponseBuilder(rid, params)
            self.engine.add_request(
                rid, list(req.prompt_token_ids), params,
                lambda item: self._on_output(builder, item),
            )
        except ValueError as e:
            self._push(rejected(rid, grpc.StatusCode.INVALID_ARGUMENT, str(e)))
            return
        except EngineDeadError as e:
            self._push(builder.error(str(e)))
            return
        self.active[rid] = builder

    def _on_output(self, builder: ResponseBuilder, item: RequestOutput | BaseException) -> None:
        rid = builder.request_id
        if isinstance(item, ValueError):
            resp = rejected(rid, grpc.StatusCode.INVALID_ARGUMENT, str(item))
        elif isinstance(item, BaseException):
            resp = builder.error(str(item))
        else:
            try:
                resp = builder.response(item)
            except Exception as e:  # noqa: BLE001 - one bad request must not stop the loop
                logger.exception("building the response of %s failed", rid)
                self.engine.abort(rid)
                resp = builder.error(f"internal error: {e!r}")
        if resp.finished:
            self.active.pop(rid, None)
        self._push(resp)

    def abort(self, request_id: str) -> None:
        if self.active.pop(request_id, None) is not None:
            self.engine.abort(request_id)

    def close(self) -> None:
        """The call is gone: nobody is left to read what its requests would produce."""
        for rid in list(self.active):
            self.abort(rid)

    async def read(self, requests: AsyncIterator[pb.GenerateStreamRequest]) -> None:
        try:
            async for msg in requests:
                for rid in msg.abort:
                    self.abort(rid)
                for req in msg.generate:
                    try:
                        self.submit(req)
                    except Exception as e:  # noqa: BLE001 - a dead reader would hang the call
                        logger.exception("submitting %s failed", req.request_id)
                        self._push(rejected(req.request_id, grpc.StatusCode.INTERNAL, repr(e)))
        finally:
            self._reader_done = True
            self._ready.set()

    async def responses(self) -> AsyncIterator[pb.GenerateStreamResponse]:
        """Until the frontend half-closes (or the worker drains) and the last request ends."""
        while True:
            if self._pending:
                batch, self._pending = self._pending, []
                yield pb.GenerateStreamResponse(responses=batch)
            elif (self._reader_done or self.draining) and not self.active:
                return
            else:
                self._ready.clear()
                await self._ready.wait()
