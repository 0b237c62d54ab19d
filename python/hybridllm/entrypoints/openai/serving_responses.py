"""OpenAI's Responses API (responses.rs), text only: POST /v1/responses and the stored
responses (GET, DELETE, input items), a background response's task and its cancel. The
rules, events and stored objects are the core's (hybridllm._api); this is their HTTP shell."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from hybridllm import _api
from hybridllm.entrypoints.openai.body import read_body
from hybridllm.entrypoints.openai.disconnect import unless_disconnected
from hybridllm.entrypoints.openai.generate import Steps, feed_all, generate_many, tokenize
from hybridllm.entrypoints.openai.sse import SSEResponse
from hybridllm.entrypoints.openai.state import AppState, get_state

router = APIRouter()
logger = logging.getLogger("hybridllm.frontend")


def _owner(state: AppState, request: Request) -> str | None:
    """Who may see a stored response (the core's rule)."""
    return state.auth.owner(request.headers.get("authorization"))


def _json(body: str) -> Response:
    return Response(body, media_type="application/json")


@router.post("/v1/responses")
async def create_response(request: Request) -> Response:
    state = get_state(request)
    body = await read_body(request, state.options.max_request_body_bytes)
    call = _api.ResponsesCall(state.api, body, state.responses, _owner(state, request))
    first = 0  # with `auto` truncation the oldest turns are dropped until the prompt fits
    while True:
        ids = await tokenize(state, call.prompt(first), False)
        max_tokens = call.fit(first, len(ids))
        if max_tokens is not None:
            break
        first += 1
    background = call.background
    gen, resp = call.plan(ids, max_tokens)
    if background:
        body = resp.queued()
        task = asyncio.create_task(_run_in_background(state, gen, resp))
        state.background[resp.id] = task
        return _json(body)
    events = await unless_disconnected(request, generate_many(state, [gen]))
    if resp.stream:
        return SSEResponse(_stream(resp, events), done=False)
    await feed_all(request, resp, events)
    return _json(resp.body())


async def _run_in_background(state: AppState, gen: _api.EngineRequest,
                             resp: _api.ResponsesResponse) -> None:
    """A background response's task: run as a request not streamed, its stored object moved
    from queued to in_progress to its end (or failed); a cancel cancels the task, which closes
    its engine stream and so aborts the engine request."""
    try:
        events = await generate_many(state, [gen])
        resp.started()
        try:
            async for p, step in events:
                resp.feed_step(p, step)
        finally:
            await events.aclose()  # type: ignore[attr-defined]
        resp.body()
    except _api.ApiError as e:
        logger.warning("background response %s failed: %s", resp.id, e.args[1])
        resp.failed(e)
    finally:
        state.background.pop(resp.id, None)


async def _stream(resp: _api.ResponsesResponse, events: Steps) -> AsyncIterator[bytes]:
    resp.opening()
    try:
        async for p, step in events:
            resp.feed_step(p, step)
            chunk = resp.take()
            if chunk is not None:
                yield chunk
    except _api.ApiError as e:
        logger.warning("stream failed: %s", e.args[1])
        yield resp.error(e)
        return
    finally:
        await events.aclose()  # type: ignore[attr-defined]
    yield resp.closing()


@router.get("/v1/responses/{response_id}")
async def retrieve_response(request: Request, response_id: str) -> Response:
    state = get_state(request)
    _api.ResponseStore.check_retrieve_query(request.query_params.get("stream"))
    return _json(state.responses.retrieve(response_id, _owner(state, request)))


@router.post("/v1/responses/{response_id}/cancel")
async def cancel_response(request: Request, response_id: str) -> Response:
    state = get_state(request)
    body = state.responses.cancel(response_id, _owner(state, request))
    task = state.background.pop(response_id, None)
    if task is not None:
        task.cancel()
    return _json(body)


@router.delete("/v1/responses/{response_id}")
async def delete_response(request: Request, response_id: str) -> Response:
    state = get_state(request)
    return _json(state.responses.delete(response_id, _owner(state, request)))


@router.get("/v1/responses/{response_id}/input_items")
async def list_input_items(request: Request, response_id: str) -> Response:
    state = get_state(request)
    q = request.query_params
    return _json(state.responses.input_items(response_id, _owner(state, request),
                                             q.get("order"), q.get("limit"), q.get("after")))
