"""POST /v1/chat/completions (chat.rs): the core's chat call, its prompt tokenized off the
event loop, the response the core builds from the engine's events; and vLLM's batch form
(chat_batch.rs), one engine request per conversation."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from hybridllm import _api
from hybridllm.entrypoints.openai.body import read_body
from hybridllm.entrypoints.openai.generate import respond, tokenize
from hybridllm.entrypoints.openai.state import get_state

router = APIRouter()


@router.post("/v1/chat/completions")
async def chat_completions(request: Request) -> Response:
    state = get_state(request)
    body = await read_body(request, state.options.max_request_body_bytes)
    call = _api.ChatCall(state.api, body, request.headers.get("x-request-id"))
    ids = await tokenize(state, call.prompt, call.add_special_tokens)
    gen, resp = call.plan(ids)
    return await respond(request, state, [gen], resp)


@router.post("/v1/chat/completions/batch")
async def chat_completions_batch(request: Request) -> Response:
    state = get_state(request)
    body = await read_body(request, state.options.max_request_body_bytes)
    call = _api.ChatBatchCall(state.api, body, request.headers.get("x-request-id"))
    ids = [await tokenize(state, p, call.add_special_tokens) for p in call.prompts]
    return await respond(request, state, *call.plan(ids))
