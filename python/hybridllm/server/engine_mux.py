"""EngineMux: every generate request of a frontend on one long-lived GenerateStream call (the
Python twin of rust-frontend/src/engine_mux.rs).

Requests and aborts go out on the call; each message back carries what one engine step
produced for its requests, and the mux routes each response by request id to its request's
queue. Closing a request's iterator before its last response aborts it in the engine. When
the call ends, every request still routed fails with the call's status, and the next request
opens a new call (worker restart, drain). A request whose reader has left STREAM_BUFFER
responses waiting (a client that stopped reading its stream) is aborted, its iterator ending
with CANCELLED.

The call is a worker's, over gRPC (grpc_client.GrpcGenerateStream), or a GenerateStreamCall
driven in this process, which hands its messages over unserialized: the same messages either
way, so a frontend behaves the same on both.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from typing import Protocol

import grpc

from hybridllm.proto import engine_pb2 as pb


class EngineCallError(Exception):
    """A failed engine call; `code` is the gRPC status code name (e.g. INVALID_ARGUMENT),
    `param` the request field a refusal names (RequestError.param), if any."""

    def __init__(self, code: str, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.param = param


OnResponse = Callable[[pb.GenerateStreamResponse], None]
OnEnd = Callable[[EngineCallError], None]
_Route = Callable[["pb.GenerateResponse | EngineCallError"], None]

_CODE_NAMES = {code.value[0]: code.name for code in grpc.StatusCode}

# Engine responses (one per step) a request may have waiting unread, as in the Rust frontend.
STREAM_BUFFER = 1024

logger = logging.getLogger(__name__)


class GenerateStream(Protocol):
    """One GenerateStream call, as the mux drives it. Its messages go to the OnResponse it was
    opened with, on the event loop; its end (if it can end) to the OnEnd, once."""

    def submit(self, req: pb.GenerateRequest) -> None: ...

    def submit_embed(self, req: pb.EmbedRequest) -> None: ...

    def abort(self, request_id: str) -> None: ...

    def close(self) -> None: ...


OpenStream = Callable[[OnResponse, OnEnd], GenerateStream]


class _Call:
    def __init__(self, open_stream: OpenStream) -> None:
        # Where each running request's responses go; None once the call has ended.
        self.routes: dict[str, _Route] | None = {}
        self.stream = open_stream(self.dispatch, self.fail)

    def dispatch(self, batch: pb.GenerateStreamResponse) -> None:
        routes = self.routes
        if routes is None:
            return
        for resp in batch.responses:
            rid = resp.request_id
            route = routes.pop(rid, None) if resp.finished else routes.get(rid)
            if route is not None:  # None: aborted here after the engine had produced this
                route(resp)

    def fail(self, error: EngineCallError) -> None:
        routes, self.routes = self.routes, None
        for route in (routes or {}).values():
            route(error)


class EngineMux:
    def __init__(self, open_stream: OpenStream) -> None:
        self._open_stream = open_stream
        self._call: _Call | None = None

    def _current_call(self) -> _Call:
        if self._call is None or self._call.routes is None:
            self._call = _Call(self._open_stream)  # opened on first use, and after it ended
        return self._call

    def generate(self, req: pb.GenerateRequest) -> AsyncIterator[pb.GenerateResponse]:
        """The request's responses, one per engine step. A refused request raises
        EngineCallError with the worker's code on the first __anext__, as does the call's
        end; leaving before the last response aborts the request."""
        return self._responses(req.request_id, lambda stream: stream.submit(req))

    async def embed(self, req: pb.EmbedRequest) -> pb.GenerateResponse:
        """The request's one response (its `embeddings`); refusals raise EngineCallError, and
        cancelling aborts what has not run yet."""
        responses = self._responses(req.request_id, lambda stream: stream.submit_embed(req))
        try:
            return await anext(responses)
        finally:
            await responses.aclose()

    async def _responses(self, rid: str, send: Callable[[GenerateStream], None]
                         ) -> AsyncIterator[pb.GenerateResponse]:
        call = self._current_call()
        routes = call.routes
        assert routes is not None
        if rid in routes:  # its responses could not be told from the running one's
            raise EngineCallError("INVALID_ARGUMENT", f"request id {rid!r} is already in use.")
        queue: asyncio.Queue[pb.GenerateResponse | EngineCallError] = asyncio.Queue()

        def route(item: pb.GenerateResponse | EngineCallError) -> None:
            if (queue.qsize() < STREAM_BUFFER or isinstance(item, EngineCallError)
                    or item.finished):
                queue.put_nowait(item)
                return
            del routes[rid]
            call.stream.abort(rid)
            message = f"request aborted: its client read none of its last {STREAM_BUFFER} " \
                "responses"
            logger.warning("request %s %s", rid, message.removeprefix("request "))
            queue.put_nowait(EngineCallError("CANCELLED", message))

        routes[rid] = route
        send(call.stream)
        finished = False
        try:
            while True:
                item = await queue.get()
                if isinstance(item, EngineCallError):
                    finished = True
                    raise item
                finished = item.finished
                if item.HasField("rejected"):
                    code = _CODE_NAMES.get(item.rejected.code, "UNKNOWN")
                    raise EngineCallError(code, item.rejected.message,
                                          item.rejected.param or None)
                yield item
                if finished:
                    return
        finally:
            if not finished and call.routes is not None and call.routes.pop(rid, None) is not None:
                call.stream.abort(rid)

    def close(self) -> None:
        """Ends the call (the engine aborts what still runs on it); requests still routed
        fail with CANCELLED."""
        if self._call is not None:
            call, self._call = self._call, None
            call.stream.close()
            call.fail(EngineCallError("CANCELLED", "the engine client was closed"))
