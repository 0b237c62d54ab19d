"""Request limits checked before any handler runs (limits.rs has the same rules and messages):
header fields (431) and the body's content type (415)."""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from hybridllm.entrypoints.openai.errors import ApiError

MAX_HEADER_FIELDS = 100
MAX_HEADER_BYTES = 32 << 10
# h11 refuses a larger header block itself (a plain 400); hyper's own limit is as large.
H11_MAX_HEADER_BLOCK = 8192 + 4096 * 100


def check_headers(headers: list[tuple[bytes, bytes]]) -> None:
    """431 when a request has more than MAX_HEADER_FIELDS header fields or more than
    MAX_HEADER_BYTES of names and values together."""
    fields, size = len(headers), sum(len(k) + len(v) for k, v in headers)
    if fields > MAX_HEADER_FIELDS or size > MAX_HEADER_BYTES:
        raise ApiError(431, f"Request header fields too large: {fields} fields, {size} bytes "
                            f"(the limit is {MAX_HEADER_FIELDS} fields and {MAX_HEADER_BYTES} "
                            "bytes).")


class HeaderLimitMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            try:
                check_headers(scope["headers"])
            except ApiError as e:
                return await e.response()(scope, receive, send)
        await self.app(scope, receive, send)


def check_json_content_type(content_type: str | None) -> None:
    """A JSON body must say so, or say nothing (415 otherwise): `application/json` or any
    `application/*+json`, parameters such as charset allowed."""
    if content_type is None:
        return
    media = content_type.split(";")[0].strip().lower()
    if media == "application/json" or (media.startswith("application/")
                                       and media.endswith("+json")):
        return
    raise ApiError(415, "Unsupported Media Type: the request body must be application/json, "
                        f"got '{content_type}'.")
