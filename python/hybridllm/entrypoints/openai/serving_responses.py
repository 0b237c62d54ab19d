"""OpenAI's Responses API, text only (responses.rs): POST /v1/responses, rendered through the
chat template like chat completions (instructions as the system message), and the stored
responses: GET and DELETE /v1/responses/{response_id}, GET .../input_items."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from hybridllm.entrypoints.openai.disconnect import unless_disconnected
from hybridllm.entrypoints.openai.errors import ApiError, bad, json_response
from hybridllm.entrypoints.openai.generate import (
    Events,
    GenRequest,
    Output,
    collect,
    generate_many,
    tokenize,
)
from hybridllm.entrypoints.openai.prompt import render_prompt
from hybridllm.entrypoints.openai.protocol import ResponsesRequest, TemplateArgs, read_request
from hybridllm.entrypoints.openai.responses_input import (
    check_metadata,
    check_unsupported,
    quote_json,
    read_input,
    sampling,
    truncation_auto,
)
from hybridllm.entrypoints.openai.responses_object import (
    ResponseHead,
    output_text,
    status,
    usage_json,
)
from hybridllm.entrypoints.openai.responses_store import StoredResponse
from hybridllm.entrypoints.openai.sse import SSEResponse, named_frame
from hybridllm.entrypoints.openai.state import AppState, check_model, check_task, get_state
from hybridllm.entrypoints.openai.validation import fit_max_tokens, validate
from hybridllm.proto import engine_pb2 as pb

router = APIRouter()
logger = logging.getLogger("hybridllm.frontend")


def _owner(state: AppState, request: Request) -> str | None:
    """Who may see a stored response: the key that created it (None when no keys are set;
    the auth middleware has already checked the key)."""
    if not state.options.api_keys:
        return None
    header = request.headers.get("authorization", "")
    return header[len("Bearer "):].strip() if header.startswith("Bearer ") else None


def _not_found(rid: str) -> ApiError:
    return ApiError(404, f"Response with id '{rid}' not found.")


@dataclass
class _ToStore:
    owner: str | None
    input_items: list[dict[str, Any]]
    conversation: list[dict[str, Any]]


def _store(state: AppState, head: ResponseHead, s: _ToStore, response: dict[str, Any],
           text: str) -> None:
    if head.store:
        conversation = [*s.conversation, {"role": "assistant", "content": text}]
        state.responses.put(head.id, StoredResponse(s.owner, response, s.input_items,
                                                    conversation))


async def _fit_prompt(state: AppState, instructions: str | None, conversation: list[Any],
                      max_tokens: int | None, auto: bool) -> tuple[list[int], int]:
    """The prompt of instructions + conversation; with auto truncation the oldest turns are
    dropped until it fits (the last one always stays)."""
    first = 0
    while True:
        system = [] if instructions is None else [{"role": "system", "content": instructions}]
        prompt = render_prompt(state, system + conversation[first:], TemplateArgs(), True)
        ids = await tokenize(state, prompt, False)
        try:
            return ids, fit_max_tokens(len(ids), max_tokens, state.max_model_len,
                                       state.options.max_tokens_limit)
        except ApiError:
            if not auto or first + 1 >= len(conversation):
                raise
            first += 1


@router.post("/v1/responses")
async def create_response(request: Request) -> Response:
    state = get_state(request)
    req = await read_request(request, ResponsesRequest, state.options.max_request_body_bytes)
    check_model(state, req.model)
    check_task(state, "Responses", embed=False)
    check_unsupported(req)
    auto = truncation_auto(req)
    check_metadata(req)
    params = validate(sampling(req, state.options.max_tokens_limit), None, state.vocab_size)
    owner = _owner(state, request)
    previous = None
    if req.previous_response_id is not None:
        previous = state.responses.get(req.previous_response_id, owner)
        if previous is None:
            raise ApiError(404, f"Previous response with id '{req.previous_response_id}' not "
                                "found.")
    inp = read_input(req.input)
    conversation = [*(previous.conversation if previous else []), *inp.messages]
    ids, max_tokens = await _fit_prompt(state, req.instructions, conversation,
                                        params.max_tokens, auto)
    head = ResponseHead(req, state.served_names[0])
    gen = generate_many(state, [GenRequest(head.id, ids, params, max_tokens)])
    prompts, events = await unless_disconnected(request, gen)
    to_store = _ToStore(owner, inp.items, conversation)
    if req.stream:
        return SSEResponse(_stream(state, events, prompts, head, to_store), framed=True)
    c = (await unless_disconnected(request, collect(events, prompts, 1)))[0]
    p = prompts[0]
    obj = head.finished(c.text, c.finish.reason, usage_json(p.prompt_tokens, p.cached_tokens,
                                                            c.tokens))
    _store(state, head, to_store, obj, c.text)
    return json_response(obj)


class _Sequence:
    """Numbers the events of one stream."""

    def __init__(self) -> None:
        self.n = 0

    def event(self, kind: str, body: dict[str, Any]) -> bytes:
        self.n += 1
        return named_frame(kind, {**body, "type": kind, "sequence_number": self.n - 1})


async def _stream(state: AppState, events: Events, prompts: list[pb.PromptInfo],
                  head: ResponseHead, to_store: _ToStore) -> AsyncIterator[bytes]:
    """The named events, in OpenAI's order, each with the next sequence_number."""
    seq = _Sequence()
    pending = head.object("in_progress", [], None)
    yield seq.event("response.created", {"response": pending})
    yield seq.event("response.in_progress", {"response": pending})
    yield seq.event("response.output_item.added",
                    {"output_index": 0, "item": head.item("in_progress", None)})

    def part(text: str) -> dict[str, Any]:
        return {"item_id": head.item_id, "output_index": 0, "content_index": 0,
                "part": output_text(text)}

    yield seq.event("response.content_part.added", part(""))
    text, finish, tokens = "", "abort", 0
    try:
        async for p, ev in events:
            if not isinstance(ev, Output):
                prompts[p] = ev
                continue
            tokens += ev.num_tokens
            if ev.finish is not None:
                finish = ev.finish.reason
            if ev.text:
                text += ev.text
                yield seq.event("response.output_text.delta", {
                    "item_id": head.item_id, "output_index": 0, "content_index": 0,
                    "delta": ev.text, "logprobs": []})
    except ApiError as e:
        logger.warning("stream failed: %s", e.message)
        yield seq.event("error", {"code": e.body()["error"]["type"], "message": e.message,
                                  "param": e.param})
        return
    finally:
        await events.aclose()  # type: ignore[attr-defined]
    yield seq.event("response.output_text.done", {
        "item_id": head.item_id, "output_index": 0, "content_index": 0, "text": text,
        "logprobs": []})
    yield seq.event("response.content_part.done", part(text))
    st = status(finish)
    yield seq.event("response.output_item.done", {"output_index": 0, "item": head.item(st, text)})
    p = prompts[0]
    done = head.finished(text, finish, usage_json(p.prompt_tokens, p.cached_tokens, tokens))
    yield seq.event("response.incomplete" if st == "incomplete" else "response.completed",
                    {"response": done})
    _store(state, head, to_store, done, text)


@router.get("/v1/responses/{response_id}")
async def retrieve_response(request: Request, response_id: str) -> Response:
    state = get_state(request)
    r = state.responses.get(response_id, _owner(state, request))
    if r is None:
        raise _not_found(response_id)
    return json_response(r.response)


@router.delete("/v1/responses/{response_id}")
async def delete_response(request: Request, response_id: str) -> Response:
    state = get_state(request)
    if not state.responses.remove(response_id, _owner(state, request)):
        raise _not_found(response_id)
    return json_response({"id": response_id, "object": "response", "deleted": True})


@router.get("/v1/responses/{response_id}/input_items")
async def list_input_items(request: Request, response_id: str) -> Response:
    """A page of the response's own input items: order (desc by default, as OpenAI), limit
    (1 to 100, default 20), after (an item id)."""
    state = get_state(request)
    r = state.responses.get(response_id, _owner(state, request))
    if r is None:
        raise _not_found(response_id)
    q = request.query_params
    order = q.get("order", "desc")
    if order not in ("asc", "desc"):
        raise bad(f'order must be "asc" or "desc", got {quote_json(order)}.', "order")
    items = r.input_items[::-1] if order == "desc" else list(r.input_items)
    raw = q.get("limit")
    limit = 20 if raw is None else int(raw) if raw.isdigit() and raw.isascii() else 0
    if not 1 <= limit <= 100:
        raise bad(f"limit must be an integer in [1, 100], got {quote_json(raw or '')}.", "limit")
    after = q.get("after")
    if after is not None:
        at = next((i for i, it in enumerate(items) if it["id"] == after), None)
        if at is None:
            raise bad(f"after: no input item with id {quote_json(after)} in this response.",
                      "after")
        items = items[at + 1:]
    page = items[:limit]
    return json_response({"object": "list", "data": page,
                          "first_id": page[0]["id"] if page else None,
                          "last_id": page[-1]["id"] if page else None,
                          "has_more": len(items) > limit})
