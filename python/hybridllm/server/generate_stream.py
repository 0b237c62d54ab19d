"""One GenerateStream call: many requests in, one message per engine step out.

The call is its requests' StepConsumer: the engine thread builds and serializes each step's
message (during the next step's forward pass), and the event loop only writes the bytes. A
slow reader gets several steps in one message (serialized protobuf messages concatenate into
their merge), still one response per request per step, so the frontend sees the same deltas
either way.

Driven in the frontend's own process (the Python frontend's in-process engine, through
EngineMux), the call hands each step's message over as it is, unserialized, to on_response.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from functools import partial

import grpc

from hybridllm.engine.async_llm_engine import (
    AsyncLLMEngine,
    EngineDeadError,
    EngineOverloadedError,
    StepItem,
)
from hybridllm.outputs import RequestOutput
from hybridllm.proto import engine_pb2 as pb
from hybridllm.server.engine_mux import OnEnd, OnResponse
from hybridllm.server.proto_convert import sampling_params_from_proto
from hybridllm.server.responses import ResponseBuilder, rejected

logger = logging.getLogger("hybridllm.worker")


class GenerateStreamCall:
    def __init__(self, engine: AsyncLLMEngine, draining: bool = False,
                 on_response: OnResponse | None = None) -> None:
        self.engine = engine
        self.draining = draining  # refuse new requests; end the call once the last finishes
        # In-process: each message goes to on_response, on the event loop; else responses().
        self.on_response = on_response
        # Running requests; written on the event loop, read by the engine thread.
        self.active: dict[str, ResponseBuilder] = {}
        self._pending: list[bytes] = []  # serialized GenerateStreamResponses
        self._ready = asyncio.Event()
        self._reader_done = False

    @classmethod
    def in_process(cls, engine: AsyncLLMEngine, on_response: OnResponse,
                   on_end: OnEnd) -> GenerateStreamCall:
        """An EngineMux's call with no gRPC in between (engine_mux.OpenStream); it never ends,
        so on_end is never called."""
        return cls(engine, on_response=on_response)

    def drain(self) -> None:
        self.draining = True
        self._ready.set()

    def _push(self, resp: pb.GenerateResponse) -> None:
        """A response made on the event loop (a refusal): out now, in a message of its own."""
        msg = pb.GenerateStreamResponse(responses=[resp])
        if self.on_response is not None:
            self.on_response(msg)
        else:
            self._push_bytes(msg.SerializeToString(), ())

    def _push_bytes(self, data: bytes, finished: list[str] | tuple[str, ...]) -> None:
        for rid in finished:
            self.active.pop(rid, None)
        self._pending.append(data)
        self._ready.set()

    def _push_message(self, msg: pb.GenerateStreamResponse, finished: list[str]) -> None:
        for rid in finished:
            self.active.pop(rid, None)
        assert self.on_response is not None
        self.on_response(msg)

    def submit(self, req: pb.GenerateRequest) -> None:
        rid = req.request_id
        if self.draining:
            self._push(rejected(rid, grpc.StatusCode.UNAVAILABLE, "the engine is shutting down"))
            return
        if rid in self.active:
            self._push(rejected(rid, grpc.StatusCode.INVALID_ARGUMENT,
                                f"request id {rid!r} is already in use."))
            return
        try:
            params = sampling_params_from_proto(req.sampling_params)
            builder = ResponseBuilder(rid, params)
            self.active[rid] = builder
            self.engine.add_request(rid, list(req.prompt_token_ids), params, self)
        except ValueError as e:
            self.active.pop(rid, None)
            self._push(rejected(rid, grpc.StatusCode.INVALID_ARGUMENT, str(e)))
        except EngineOverloadedError as e:  # frontends answer 429 + Retry-After
            self.active.pop(rid, None)
            self._push(rejected(rid, grpc.StatusCode.RESOURCE_EXHAUSTED, str(e)))
        except EngineDeadError as e:
            self.active.pop(rid, None)
            self._push(builder.error(str(e)))

    def on_step(self, items: list[StepItem]) -> Callable[[], None] | None:
        """Engine thread: this step's responses, serialized (in-process: as the message), for
        the event loop to send."""
        msg = pb.GenerateStreamResponse()
        finished = []
        active = self.active
        # First tokens lead the message: the frontend handles its responses in order, and a
        # stream's first token is what its client has waited on longest (TTFT).
        firsts: list[StepItem] = []
        others: list[StepItem] = []
        for it in items:
            b = active.get(it[0])
            (firsts if b is not None and b.first else others).append(it)
        for rid, item in firsts + others:
            builder = active.get(rid)
            if builder is None:
                continue  # aborted here while the step was running
            if isinstance(item, ValueError):
                msg.responses.append(rejected(rid, grpc.StatusCode.INVALID_ARGUMENT, str(item)))
            elif isinstance(item, BaseException):
                msg.responses.append(builder.error(str(item)))
            else:
                self._fill(msg, builder, item)
            if msg.responses[-1].finished:
                finished.append(rid)
        if not msg.responses:
            return None
        if self.on_response is not None:
            return partial(self._push_message, msg, finished)
        return partial(self._push_bytes, msg.SerializeToString(), finished)

    def _fill(self, msg: pb.GenerateStreamResponse, builder: ResponseBuilder,
              out: RequestOutput) -> None:
        try:
            builder.fill(msg.responses.add(), out)
        except Exception as e:  # noqa: BLE001 - one bad request must not stop the engine
            logger.exception("building the response of %s failed", builder.request_id)
            self.engine.abort(builder.request_id)
            del msg.responses[-1]
            msg.responses.append(builder.error(f"internal error: {e!r}"))

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
                        self.abort(req.request_id)
                        self._push(rejected(req.request_id, grpc.StatusCode.INTERNAL, repr(e)))
        finally:
            self._reader_done = True
            self._ready.set()

    async def responses(self) -> AsyncIterator[bytes]:
        """Serialized GenerateStreamResponses, until the frontend half-closes (or the worker
        drains) and the last request ends."""
        while True:
            if self._pending:
                batch, self._pending = self._pending, []
                yield batch[0] if len(batch) == 1 else b"".join(batch)
            elif (self._reader_done or self.draining) and not self.active:
                return
            else:
                self._ready.clear()
                await self._ready.wait()
