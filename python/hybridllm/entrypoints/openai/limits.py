"""Request limits checked before any handler runs (the rules and messages are the core's, as in
limits.rs): header fields (431), and what h11 itself allows."""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from hybridllm import _api
from hybridllm.entrypoints.openai.errors import response

# h11 refuses a larger header block itself (a plain 400); hyper's own limit is as large.
H11_MAX_HEADER_BLOCK = 8192 + 4096 * 100


class HeaderLimitMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = scope["headers"]
            try:
                _api.check_headers(len(headers), sum(len(k) + len(v) for k, v in headers))
            except _api.ApiError as e:
                return await response(e)(scope, receive, send)
        await self.app(scope, receive, send)
