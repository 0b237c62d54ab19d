"""The GenerateStream call of the worker's gRPC contract as EngineMux drives it (the client is
engine_client.GrpcEngineClient), and waiting for a worker to serve."""

from __future__ import annotations

import asyncio
import subprocess
import threading
import time
from collections.abc import AsyncIterator

import grpc

from hybridllm.proto import engine_pb2 as pb
from hybridllm.proto import engine_pb2_grpc as pb_grpc
from hybridllm.server.engine_mux import EngineCallError, OnEnd, OnResponse


class GrpcGenerateStream:
    """One GenerateStream call to a worker, as EngineMux drives it (engine_mux.GenerateStream).
    What is queued by the time gRPC asks for the next request message goes out in it."""

    def __init__(self, stub: pb_grpc.EngineStub, on_response: OnResponse,
                 on_end: OnEnd) -> None:
        self._outbox: asyncio.Queue[pb.GenerateRequest | pb.EmbedRequest | str | None] = (
            asyncio.Queue())
        self._call = stub.GenerateStream(self._requests())
        self._reader = asyncio.ensure_future(self._read(on_response, on_end))

    def submit(self, req: pb.GenerateRequest) -> None:
        self._outbox.put_nowait(req)

    def submit_embed(self, req: pb.EmbedRequest) -> None:
        self._outbox.put_nowait(req)

    def abort(self, request_id: str) -> None:
        self._outbox.put_nowait(request_id)

    def close(self) -> None:
        self._call.cancel()  # the worker aborts what still runs on the call

    async def _requests(self) -> AsyncIterator[pb.GenerateStreamRequest]:
        outbox = self._outbox
        while True:
            items = [await outbox.get()]
            while not outbox.empty():
                items.append(outbox.get_nowait())
            msg = pb.GenerateStreamRequest()
            for item in items:
                if item is None:
                    return  # the call has ended
                if isinstance(item, str):
                    msg.abort.append(item)
                elif isinstance(item, pb.EmbedRequest):
                    msg.embed.append(item)
                else:
                    msg.generate.append(item)
            yield msg

    async def _read(self, on_response: OnResponse, on_end: OnEnd) -> None:
        try:
            async for batch in self._call:
                on_response(batch)
            error = EngineCallError("UNAVAILABLE", "the engine ended the generate stream")
        except grpc.aio.AioRpcError as e:
            error = EngineCallError(e.code().name, e.details() or "")
        self._outbox.put_nowait(None)  # ends the request writer, waiting for more otherwise
        on_end(error)


def wait_until_serving(address: str, proc: subprocess.Popen[bytes],
                       stop: threading.Event, timeout: float = 600.0) -> bool:
    """Block until the worker at address reports SERVING; False if it died or we were stopped."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not stop.is_set():
        if proc.poll() is not None:
            return False
        with grpc.insecure_channel(address) as channel:
            try:
                resp = pb_grpc.EngineStub(channel).Health(pb.HealthRequest(), timeout=1.0)
                if resp.status == pb.HealthResponse.SERVING:
                    return True
            except grpc.RpcError:
                pass
        stop.wait(0.2)
    return False
