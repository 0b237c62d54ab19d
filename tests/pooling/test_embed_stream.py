"""Embedding requests on the worker's GenerateStream call, in-process (the same call the gRPC
worker serves): one response with every input's vector, refusals with the worker's codes."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from hybridllm.config import EngineArgs
from hybridllm.engine.async_llm_engine import AsyncLLMEngine
from hybridllm.proto import engine_pb2 as pb
from hybridllm.server.engine_client import InProcessEngineClient
from hybridllm.server.engine_mux import EngineCallError


def _request(rid: str, *inputs: list[int], normalize: bool | None = None) -> pb.EmbedRequest:
    req = pb.EmbedRequest(request_id=rid, inputs=[pb.EmbedInput(token_ids=x) for x in inputs])
    if normalize is not None:
        req.normalize = normalize
    return req


def test_vectors_equal_offline_and_refusals(embed_model_path, embed_llm) -> None:
    inputs = [[101, 7592, 2088, 102], [101, 2023, 102], [101] + [2088] * 40 + [102]]
    offline = np.array([o.outputs.embedding for o in embed_llm.embed(inputs)])

    async def run() -> None:
        engine = AsyncLLMEngine.from_engine_args(EngineArgs(model=str(embed_model_path)))
        client = InProcessEngineClient(engine, "m")
        await client.wait_ready()
        try:
            resp = await client.embed(_request("a", *inputs))
            ours = np.array([list(e.values) for e in resp.embeddings])
            assert ours.shape == (3, 384)
            np.testing.assert_allclose(ours, offline, atol=1e-6)
            raw = await client.embed(_request("b", inputs[0], normalize=False))
            assert np.linalg.norm(list(raw.embeddings[0].values)) > 1.5
            with pytest.raises(EngineCallError) as e:
                await client.embed(_request("c", inputs[0], [101, 30522, 102]))
            assert e.value.code == "INVALID_ARGUMENT" and "30522" in e.value.message
            with pytest.raises(EngineCallError) as e:
                await client.embed(_request("d"))
            assert e.value.code == "INVALID_ARGUMENT"
            gen = pb.GenerateRequest(request_id="g", prompt_token_ids=[101, 102])
            with pytest.raises(EngineCallError) as e:
                await anext(client.generate(gen.request_id, list(gen.prompt_token_ids),
                                            pb.SamplingParams()))
            assert e.value.code == "FAILED_PRECONDITION"
            assert (await client.load()).num_waiting == 0
        finally:
            await client.close()

    asyncio.run(run())


def test_generative_model_refuses_embed_requests() -> None:
    async def run() -> None:
        engine = AsyncLLMEngine.from_engine_args(EngineArgs(mock_engine=True))
        client = InProcessEngineClient(engine, "m")
        await client.wait_ready()
        try:
            with pytest.raises(EngineCallError) as e:
                await client.embed(_request("a", [1, 2, 3]))
            assert e.value.code == "FAILED_PRECONDITION"
            assert "generative" in e.value.message
        finally:
            await client.close()

    asyncio.run(run())
