"""A request's body as HTTP delivers it (request.rs's JsonBody): 415 for a content type that
is not JSON, 413 over the size limit. Reading it into the typed request is the core's
(hybridllm._api: 400 for invalid JSON or no JSON object, naming the first mistyped field)."""

from __future__ import annotations

from starlette.requests import Request

from hybridllm.entrypoints.openai.errors import ApiError
from hybridllm.entrypoints.openai.limits import check_json_content_type


async def read_body(request: Request, limit: int) -> bytes:
    check_json_content_type(request.headers.get("content-type"))
    too_large = ApiError(413, f"Request body is larger than the limit of {limit} bytes.")
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise too_large
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise too_large
    return bytes(body)
