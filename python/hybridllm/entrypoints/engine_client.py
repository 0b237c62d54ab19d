"""How a frontend talks to the engine: the worker contract's facts, in-process or over gRPC.

Both implementations speak the messages of `proto/engine.proto`, so the frontend code (and
every number it prints) is the same whichever is used; the in-process one simply runs the
worker's own servicer against a local AsyncLLMEngine, with no IPC.
"""

from __future__ import annotations

import abc
import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any, NoReturn

import grpc

from hybridllm.proto import engine_pb2 as pb


class EngineCallError(Exception):
    """A failed engine call; `code` is the gRPC status code name (e.g. INVALID_ARGUMENT)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class EngineClient(abc.ABC):
    @abc.abstractmethod
    async def start(self) -> None:
        """Called once at application start-up, inside the serving event loop."""

    @abc.abstractmethod
    async def close(self) -> None: ...

    @abc.abstractmethod
    def generate(
        self, request_id: str, prompt_ids: list[int], params: pb.SamplingParams
    ) -> AsyncIterator[pb.GenerateResponse]:
        """One message per engine step; closing the iterator early aborts the request."""

    @abc.abstractmethod
    async def abort(self, request_ids: list[str]) -> None: ...

    @abc.abstractmethod
    async def health(self) -> bool: ...

    @abc.abstractmethod
    async def model_info(self) -> pb.ModelInfo: ...

    @abc.abstractmethod
    async def load(self) -> pb.LoadResponse: ...

    async def wait_ready(self) -> pb.ModelInfo:
        """Model facts once the engine answers (a remote worker may still be starting)."""
        await self.start()
        return await self.model_info()


class _LocalContext:
    """Stands in for grpc.aio.ServicerContext: abort() raises what a gRPC client would see."""

    async def abort(self, code: grpc.StatusCode, details: str = "") -> NoReturn:
        raise EngineCallError(code.name, details)


class InProcessEngineClient(EngineClient):
    def __init__(self, engine: Any, served_model_name: str) -> None:
        from hybridllm.server.grpc_server import EngineServicer

        self.engine = engine  # AsyncLLMEngine
        self.servicer = EngineServicer(engine, served_model_name)

    @classmethod
    def from_engine_args(cls, engine_args: Any) -> InProcessEngineClient:
        from hybridllm.engine.async_llm_engine import AsyncLLMEngine

        engine = AsyncLLMEngine.from_engine_args(engine_args, detokenize=False)
        return cls(engine, engine.engine.config.served_model_name)

    async def start(self) -> None:
        self.engine.start()

    async def close(self) -> None:
        await self.engine.shutdown()

    async def generate(
        self, request_id: str, prompt_ids: list[int], params: pb.SamplingParams
    ) -> AsyncIterator[pb.GenerateResponse]:
        req = pb.GenerateRequest(
            request_id=request_id, prompt_token_ids=prompt_ids, sampling_params=params
        )
        stream = self.servicer.Generate(req, _LocalContext())  # type: ignore[arg-type]
        try:
            async for msg in stream:
                yield msg
        finally:
            await stream.aclose()  # leaves engine.generate early, which aborts the request

    async def abort(self, request_ids: list[str]) -> None:
        for rid in request_ids:
            self.engine.abort(rid)

    async def health(self) -> bool:
        r = await self.servicer.Health(pb.HealthRequest(), None)  # type: ignore[arg-type]
        return r.status == pb.HealthResponse.SERVING

    async def model_info(self) -> pb.ModelInfo:
        return await self.servicer.GetModelInfo(pb.ModelInfoRequest(), None)  # type: ignore[arg-type]

    async def load(self) -> pb.LoadResponse:
        return await self.servicer.GetLoad(pb.LoadRequest(), None)  # type: ignore[arg-type]


class GrpcEngineClient(EngineClient):
    """A `hybridllm worker` reached over unix:///path or host:port."""

    def __init__(self, address: str, connect_timeout_s: float = 60.0) -> None:
        self.address = address
        self.connect_timeout_s = connect_timeout_s
        self._client: Any = None

    @property
    def stub(self) -> Any:
        if self._client is None:
            raise RuntimeError("GrpcEngineClient.start() was not called")
        return self._client.stub

    async def start(self) -> None:
        from hybridllm.server.grpc_client import EngineGrpcClient

        if self._client is None:  # channels bind to the loop they are created in
            self._client = EngineGrpcClient(self.address)

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()

    async def wait_ready(self) -> pb.ModelInfo:
        """GetModelInfo, retried while the worker is still starting (like the Rust one)."""
        await self.start()
        deadline = time.monotonic() + self.connect_timeout_s
        while True:
            try:
                return await self.model_info()
            except EngineCallError as e:
                if time.monotonic() >= deadline:
                    raise RuntimeError(f"cannot reach the engine: {e.message} ({e.code})") from e
                await asyncio.sleep(0.25)

    async def generate(
        self, request_id: str, prompt_ids: list[int], params: pb.SamplingParams
    ) -> AsyncIterator[pb.GenerateResponse]:
        req = pb.GenerateRequest(
            request_id=request_id, prompt_token_ids=prompt_ids, sampling_params=params
        )
        call = self.stub.Generate(req)
        try:
            async for msg in call:
                yield msg
        except grpc.aio.AioRpcError as e:
            raise EngineCallError(e.code().name, e.details() or "") from e
        finally:
            call.cancel()  # no-op after the end; cancels (aborts in the worker) otherwise

    async def abort(self, request_ids: list[str]) -> None:
        try:
            await self.stub.Abort(pb.AbortRequest(request_ids=request_ids), timeout=5.0)
        except grpc.aio.AioRpcError:
            pass

    async def health(self) -> bool:
        try:
            r = await self.stub.Health(pb.HealthRequest(), timeout=5.0)
        except grpc.aio.AioRpcError:
            return False
        return r.status == pb.HealthResponse.SERVING

    async def model_info(self) -> pb.ModelInfo:
        try:
            return await self.stub.GetModelInfo(pb.ModelInfoRequest(), timeout=5.0)
        except grpc.aio.AioRpcError as e:
            raise EngineCallError(e.code().name, e.details() or "") from e

    async def load(self) -> pb.LoadResponse:
        try:
            return await self.stub.GetLoad(pb.LoadRequest(), timeout=2.0)
        except grpc.aio.AioRpcError as e:
            raise EngineCallError(e.code().name, e.details() or "") from e
