"""POST /invocations (invocations.rs): vLLM's SageMaker endpoint, the body read once and
handed to the handler of the API it calls."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from hybridllm import _api
from hybridllm.entrypoints.openai import serving_chat, serving_completions, serving_embedding
from hybridllm.entrypoints.openai.body import read_body, replay
from hybridllm.entrypoints.openai.state import get_state

router = APIRouter()
HANDLERS = {"chat": serving_chat.chat_completions, "completion": serving_completions.completions,
            "embedding": serving_embedding.embeddings}


@router.post("/invocations")
async def invocations(request: Request) -> Response:
    st = get_state(request)
    body = await read_body(request, st.options.max_request_body_bytes)
    handler = HANDLERS[_api.invocation(st.api, body)]
    return await handler(Request(request.scope, replay(body, request.receive)))
