"""POST /v1/completions (completions.rs): the core's completion call, its text prompts
tokenized off the event loop, one engine request per prompt, the response the core builds
from their events. POST /inference/v1/generate is the same call in vLLM's tokens-in,
tokens-out shape (generate_tokens.rs)."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from hybridllm import _api
from hybridllm.entrypoints.openai.body import read_body
from hybridllm.entrypoints.openai.generate import respond, tokenize
from hybridllm.entrypoints.openai.state import AppState, get_state

router = APIRouter()


@router.post("/v1/completions")
async def completions(request: Request) -> Response:
    state = get_state(request)
    body = await read_body(request, state.options.max_request_body_bytes)
    call = _api.CompletionCall(state.api, body, request.headers.get("x-request-id"))
    return await _run(request, state, call)


@router.post("/inference/v1/generate")
async def generate_tokens(request: Request) -> Response:
    """vLLM's tokens in, tokens out: the same call, in vLLM's GenerateResponse shape."""
    state = get_state(request)
    body = await read_body(request, state.options.max_request_body_bytes)
    call = _api.CompletionCall(state.api, body, request.headers.get("x-request-id"), tokens=True)
    return await _run(request, state, call)


async def _run(request: Request, state: AppState, call: _api.CompletionCall) -> Response:
    ids = [p if isinstance(p, list) else await tokenize(state, p, call.add_special_tokens)
           for p in call.prompts]
    gens, resp = call.plan(ids)
    return await respond(request, state, gens, resp)
