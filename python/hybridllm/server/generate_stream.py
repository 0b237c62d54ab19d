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
from hybridllm.outputs import PoolingRequestOutput, RequestOutput
from hybridllm.proto import engine_pb2 as pb
from hybridllm.server.engine_mux import OnEnd, OnResponse
from hybridllm.server.pending_embed import PendingEmbed
from hybridllm.server.proto_convert import request_params_from_proto
from hybridllm.server.responses import ResponseBuilder, refused, rejected

logger = logging.getLogger("hybridllm.worker")


class GenerateStreamCall:
    def __init__(self, engine: AsyncLLMEngine, draining: bool = False,
                 on_response: OnResponse | None = None) -> None:
        self.engine = engine
        self.draining = draining  # refuse new requests; end the call once the last finishes
        # In-process: each message goes to on_response, on the event loop; else responses().
        self.on_response = on_response
        # Running requests; written on the event loop, read by the engine thread.
        self.active: dict[str, ResponseBuilder | PendingEmbed] = {}
        # An embedding request's inputs (engine request id -> its request, input index).
        self.parts: dict[str, tuple[PendingEmbed, int]] = {}
        self._pending: list[bytes] = []  # serialized GenerateStreamResponses
        self._ready = asyncio.Event()
        self._reader_done = False

    @classmethod
    def in_process(cls, engine: AsyncLLMEngine, on_response: OnResponse,
                   on_end: OnEnd) -> GenerateStreamCall:
        """An EngineMux's call with no gRPC in between (engine_mux.OpenStream); it never ends,
        so on_end is never called."""
        return cls(engine, on_response=on_response)

    @property
    def embed_model(self) -> bool:
        return self.engine.engine.config.task == "embed"

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

    def _forget(self, rid: str) -> ResponseBuilder | PendingEmbed | None:
        request = self.active.pop(rid, None)
        if isinstance(request, PendingEmbed):
            for part in request.part_ids:
                self.parts.pop(part, None)
        return request

    def _push_bytes(self, data: bytes, finished: list[str] | tuple[str, ...]) -> None:
        for rid in finished:
            self._forget(rid)
        self._pending.append(data)
        self._ready.set()

    def _push_message(self, msg: pb.GenerateStreamResponse, finished: list[str]) -> None:
        for rid in finished:
            self._forget(rid)
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
        if self.embed_model:
            self._push(rejected(rid, grpc.StatusCode.FAILED_PRECONDITION,
                                "this is an embedding model: it cannot generate."))
            return
        try:
            params = request_params_from_proto(req)
            builder = ResponseBuilder(rid, params)
            self.active[rid] = builder
            self.engine.add_request(rid, list(req.prompt_token_ids), params, self, req.priority)
        except ValueError as e:
            self.active.pop(rid, None)
            self._push(refused(rid, e))
        except EngineOverloadedError as e:  # frontends answer 429 + Retry-After
            self.active.pop(rid, None)
            self._push(rejected(rid, grpc.StatusCode.RESOURCE_EXHAUSTED, str(e)))
        except EngineDeadError as e:
            self.active.pop(rid, None)
            self._push(builder.error(str(e)))

    def submit_embed(self, req: pb.EmbedRequest) -> None:
        rid = req.request_id
        refusal = (
            (grpc.StatusCode.UNAVAILABLE, "the engine is shutting down") if self.draining
            else (grpc.StatusCode.INVALID_ARGUMENT, f"request id {rid!r} is already in use.")
            if rid in self.active
            else (grpc.StatusCode.FAILED_PRECONDITION,
                  "this is a generative model: it cannot embed.") if not self.embed_model
            else (grpc.StatusCode.INVALID_ARGUMENT, "inputs: at least one input is required.")
            if not req.inputs else None
        )
        if refusal is not None:
            self._push(rejected(rid, *refusal))
            return
        pending = PendingEmbed(req)
        self.active[rid] = pending
        for i, part in enumerate(pending.part_ids):
            self.parts[part] = (pending, i)
        try:
            for part, ids in zip(pending.part_ids, pending.inputs):
                self.engine.add_request(part, ids, pending.params, self)
        except (ValueError, EngineDeadError, EngineOverloadedError) as e:
            self.abort(rid)
            self._push(pending.failed(e))

    def _embed_step(self, msg: pb.GenerateStreamResponse, part: tuple[PendingEmbed, int],
                    item: RequestOutput | PoolingRequestOutput | BaseException,
                    finished: list[str]) -> None:
        """Engine thread: one input's vector; the request's response once all are in."""
        pending, index = part
        if pending.done or self.active.get(pending.request_id) is not pending:
            return  # answered already, or aborted here while the step was running
        if isinstance(item, BaseException):
            pending.done = True
            for other in pending.part_ids:
                self.engine.abort(other)
            msg.responses.append(pending.failed(item))
        elif isinstance(item, PoolingRequestOutput) and pending.add(index, item):
            pending.done = True
            pending.fill(msg.responses.add())
        else:
            return
        finished.append(pending.request_id)

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
        parts = self.parts
        for rid, item in firsts + others:
            part = parts.get(rid)
            if part is not None:
                self._embed_step(msg, part, item, finished)
                continue
            builder = active.get(rid)
            if not isinstance(builder, ResponseBuilder):
                continue  # aborted here while the step was running
            if isinstance(item, ValueError):
                msg.responses.append(refused(rid, item))
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
        request = self._forget(request_id)
        if isinstance(request, PendingEmbed):
            for part in request.part_ids:
                self.engine.abort(part)
        elif request is not None:
            self.engine.abort(request_id)

    def close(self) -> None:
        """The call is gone: nobody is left to read what its requests would produce."""
        for rid in list(self.active):
            self.abort(rid)

    def _submit_or_refuse(self, rid: str, submit: Callable[[], None]) -> None:
        try:
            submit()
        except Exception as e:  # noqa: BLE001 - a dead reader would hang the call
            logger.exception("submitting %s failed", rid)
            self.abort(rid)
            self._push(rejected(rid, grpc.StatusCode.INTERNAL, repr(e)))

    async def read(self, requests: AsyncIterator[pb.GenerateStreamRequest]) -> None:
        try:
            async for msg in requests:
                for rid in msg.abort:
                    self.abort(rid)
                for embed in msg.embed:
                    self._submit_or_refuse(embed.request_id, partial(self.submit_embed, embed))
                for req in msg.generate:
                    self._submit_or_refuse(req.request_id, partial(self.submit, req))
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
