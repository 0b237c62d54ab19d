"""POST /v1/embeddings and vLLM's /pooling (embeddings.rs): the core's embedding call (inputs
checked, tokenized and truncated in Rust, off the event loop when long), pooled by the
worker's Embed call, the body the core writes."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from hybridllm import _api
from hybridllm.entrypoints.openai.body import read_body
from hybridllm.entrypoints.openai.disconnect import ClientDisconnected, unless_disconnected
from hybridllm.entrypoints.openai.errors import from_engine
from hybridllm.entrypoints.openai.state import get_state
from hybridllm.proto import engine_pb2 as pb
from hybridllm.server.engine_client import EngineCallError

router = APIRouter()

INLINE_TOKENIZE_BYTES = 4096  # tokenized in place below this: a thread hop costs more


@router.post("/v1/embeddings")
@router.post("/pooling", name="pooling")  # vLLM's: the same call, its own answer
async def embeddings(request: Request) -> Response:
    state = get_state(request)
    call = _api.EmbeddingCall(state.api,
                              await read_body(request, state.options.max_request_body_bytes),
                              request.headers.get("x-request-id"),
                              pooling=request.url.path.endswith("/pooling"))
    if call.text_bytes <= INLINE_TOKENIZE_BYTES:
        request_id, ids, resp = call.plan()
    else:  # off the event loop: 2,048 long texts take a while
        request_id, ids, resp = await asyncio.to_thread(call.plan)
    embed = pb.EmbedRequest(request_id=request_id,
                            inputs=[pb.EmbedInput(token_ids=x) for x in ids])
    if call.normalize is not None:
        embed.normalize = call.normalize
    try:
        reply = await unless_disconnected(request, state.engine.embed(embed))
    except EngineCallError as e:
        raise from_engine(e) from None
    except ClientDisconnected:
        return Response(status_code=499)  # nobody is left to read it
    vectors = [list(e.values) for e in reply.embeddings]
    raw = resp.raw(vectors)
    if raw is not None:  # vLLM's "bytes": the vectors' bytes, described by a header
        body, media_type, metadata = raw
        return Response(body, media_type=media_type,
                        headers=None if metadata is None else {"metadata": metadata})
    return Response(resp.body(vectors), media_type="application/json")
