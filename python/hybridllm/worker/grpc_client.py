"""A Python client of the worker's gRPC contract (tests, the Python frontend's gRPC mode)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc

from hybridllm.proto import engine_pb2 as pb
from hybridllm.proto import engine_pb2_grpc as pb_grpc
from hybridllm.sampling_params import SamplingParams
from hybridllm.worker.grpc_server import GRPC_OPTIONS
from hybridllm.worker.proto_convert import sampling_params_to_proto


def grpc_target(address: str) -> str:
    """Our addresses are unix:///path or host:port; grpc wants unix:/// or plain host:port."""
    return address


class EngineGrpcClient:
    def __init__(self, address: str) -> None:
        self.channel = grpc.aio.insecure_channel(grpc_target(address), options=GRPC_OPTIONS)
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
