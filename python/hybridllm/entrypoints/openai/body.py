"""A request's body as HTTP delivers it (request.rs's JsonBody): its content type and size
checked by the core's limits (415, 413) as it arrives. Reading it into the typed request is
the core's too (hybridllm._api: 400 for invalid JSON or no JSON object, naming the first
mistyped field)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.types import Message, Receive

from hybridllm import _api


async def read_body(request: Request, limit: int) -> bytes:
    content_type = request.headers.get("content-type")
    _api.check_json_content_type(content_type.encode("latin-1") if content_type else None)
    declared = request.headers.get("content-length", "")
    _api.check_body_size(int(declared) if declared.isdigit() else 0, limit)
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        _api.check_body_size(len(body), limit)
    return bytes(body)


def replay(body: bytes, receive: Receive) -> Receive:
    """A receive giving `body` (read once already) first, then the client's own messages."""
    sent = False

    async def again() -> Message:
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return again
