"""Request limits checked before any handler runs (the rules and messages are the core's, as in
limits.rs): header fields (431), and what h11 itself allows."""

from __future__ import annotations

from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from hybridllm import _api

# h11 refuses a larger header block itself (a plain 400); hyper's own limit is as large.
H11_MAX_HEADER_BLOCK = 8192 + 4096 * 100


def core_response(e: _api.ApiError) -> Response:
    """A refusal of the core, as the Rust frontend writes it."""
    status, body, headers = e.args
    return Response(body, status, dict(headers), media_type="application/json")


class HeaderLimitMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = scope["headers"]
            try:
                _api.check_headers(len(headers), sum(len(k) + len(v) for k, v in headers))
            except _api.ApiError as e:
                return await core_response(e)(scope, receive, send)
        await self.app(scope, receive, send)
