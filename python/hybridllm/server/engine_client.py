"""The client of the worker contract, in-process or over gRPC (the Python fallback frontend,
the tests).

Both put every request on one GenerateStream call through EngineMux, like the Rust frontend,
so the frontend code (and every number it prints) is the same on either; in-process, that call
is the worker's own GenerateStreamCall on a local AsyncLLMEngine, with no IPC or serializing.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from functools import partial
from typing import Any

import grpc

from hybridllm.proto import engine_pb2 as pb
from hybridllm.proto import engine_pb2_grpc as pb_grpc
from hybridllm.server.engine_mux import EngineCallError, EngineMux
from hybridllm.server.grpc_client import GrpcGenerateStream
from hybridllm.server.grpc_server import GRPC_OPTIONS


class EngineClient(abc.ABC):
    """The worker contract's calls: Generate on one GenerateStream call (`mux`), the others
    unary; over gRPC or, in-process, straight to the worker's own servicer."""

    mux: EngineMux
    connect_timeout_s = 60.0

    @abc.abstractmethod
    async def start(self) -> None:
        """Called once at application start-up, inside the serving event loop."""

    @abc.abstractmethod
    async def close(self) -> None: ...

    @abc.abstractmethod
    async def _unary(self, method: str, request: Any, timeout: float) -> Any:
        """Calls `method` of the Engine service; failures raise EngineCallError."""

    def generate(self, request_id: str, prompt_ids: list[int], params: pb.SamplingParams,
                 beam: pb.BeamSearchParams | None = None,
                 priority: int = 0) -> AsyncIterator[pb.GenerateResponse]:
        """One message per engine step; closing the iterator early aborts the request."""
        return self.mux.generate(pb.GenerateRequest(
            request_id=request_id, prompt_token_ids=prompt_ids, sampling_params=params,
            beam_search=beam, priority=priority))

    async def embed(self, request: pb.EmbedRequest) -> pb.GenerateResponse:
        """The request's one response, its `embeddings`; refusals raise EngineCallError, and
        cancelling frees the inputs that have not run."""
        return await self.mux.embed(request)

    async def abort(self, request_ids: list[str]) -> None:
        with contextlib.suppress(EngineCallError):
            await self._unary("Abort", pb.AbortRequest(request_ids=request_ids), 5.0)

    async def health(self, timeout: float = 5.0) -> bool:
        try:
            r = await self._unary("Health", pb.HealthRequest(), timeout)
        except EngineCallError:
            return False
        return r.status == pb.HealthResponse.SERVING

    async def model_info(self) -> pb.ModelInfo:
        return await self._unary("GetModelInfo", pb.ModelInfoRequest(), 5.0)

    async def load(self) -> pb.LoadResponse:
        return await self._unary("GetLoad", pb.LoadRequest(), 2.0)

    async def wait_ready(self) -> pb.ModelInfo:
        """GetModelInfo, retried while a worker is still starting (like the Rust frontend)."""
        await self.start()
        deadline = time.monotonic() + self.connect_timeout_s
        while True:
            try:
                return await self.model_info()
            except EngineCallError as e:
                if time.monotonic() >= deadline:
                    raise RuntimeError(f"cannot reach the engine: {e.message} ({e.code})") from e
                await asyncio.sleep(0.25)


class InProcessEngineClient(EngineClient):
    def __init__(self, engine: Any, served_model_name: str) -> None:
        from hybridllm.server.generate_stream import GenerateStreamCall
        from hybridllm.server.grpc_server import EngineServicer

        self.engine = engine  # AsyncLLMEngine
        self.servicer = EngineServicer(engine, served_model_name)
        self.mux = EngineMux(partial(GenerateStreamCall.in_process, engine))

    async def start(self) -> None:
        self.engine.start()

    async def close(self) -> None:
        self.mux.close()
        await self.engine.shutdown()

    async def _unary(self, method: str, request: Any, timeout: float) -> Any:
        return await getattr(self.servicer, method)(request, None)


class GrpcEngineClient(EngineClient):
    """A `hybridllm worker` reached over unix:///path or host:port. Channels bind to the event
    loop they are made in: `start()` (or the first call) makes it."""

    def __init__(self, address: str, connect_timeout_s: float = 60.0) -> None:
        self.address = address
        self.connect_timeout_s = connect_timeout_s
        self.channel: Any = None

    async def start(self) -> None:
        if self.channel is None:
            self.channel = grpc.aio.insecure_channel(self.address, options=GRPC_OPTIONS)
            self.stub = pb_grpc.EngineStub(self.channel)
            self.mux = EngineMux(partial(GrpcGenerateStream, self.stub))

    async def close(self) -> None:
        if self.channel is not None:
            self.mux.close()
            await self.channel.close()

    async def _unary(self, method: str, request: Any, timeout: float) -> Any:
        await self.start()
        try:
            return await getattr(self.stub, method)(request, timeout=timeout)
        except grpc.aio.AioRpcError as e:
            raise EngineCallError(e.code().name, e.details() or "") from e
