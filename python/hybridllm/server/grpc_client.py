"""A Python client of the worker's gRPC contract (tests, the Python frontend's gRPC mode)."""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import AsyncIterator

import grpc

from hybridllm.proto import engine_pb2 as pb
from hybridllm.proto import engine_pb2_grpc as pb_grpc
from hybridllm.sampling_params import SamplingParams
from hybridllm.server.grpc_server import GRPC_OPTIONS
from hybridllm.server.proto_convert import sampling_params_to_proto


class EngineGrpcClient:
    def __init__(self, address: str) -> None:
        self.channel = grpc.aio.insecure_channel(address, options=GRPC_OPTIONS)
        self.stub = pb_grpc.EngineStub(self.channel)

    async def generate(
        self, prompt_token_ids: list[int], params: SamplingParams, request_id: str
    ) -> AsyncIterator[pb.GenerateResponse]:
        request = pb.GenerateRequest(
            request_id=request_id,
            prompt_token_ids=prompt_token_ids,
            sampling_params=sampling_params_to_proto(params),
        )
        call = self.stub.Generate(request)
        try:
            async for response in call:
                yield response
        finally:
            call.cancel()  # no-op when the stream already ended; aborts it otherwise

    async def abort(self, request_ids: list[str]) -> None:
        await self.stub.Abort(pb.AbortRequest(request_ids=request_ids))

    async def health(self, timeout: float = 5.0) -> bool:
        try:
            resp = await self.stub.Health(pb.HealthRequest(), timeout=timeout)
        except grpc.aio.AioRpcError:
            return False
        return resp.status == pb.HealthResponse.SERVING

    async def model_info(self) -> pb.ModelInfo:
        return await self.stub.GetModelInfo(pb.ModelInfoRequest())

    async def load(self) -> pb.LoadResponse:
        return await self.stub.GetLoad(pb.LoadRequest())

    async def close(self) -> None:
        await self.channel.close()


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
