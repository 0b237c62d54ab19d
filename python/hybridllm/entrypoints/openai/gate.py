"""What runs before any handler, each rule the core's (limits.rs, cors.rs, auth.rs): the header
limits (431), CORS (a preflight answered whole; the policy's headers on every other answer
to a request that names its origin), then the API key (401)."""

from __future__ import annotations

from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from hybridllm import _api
from hybridllm.entrypoints.openai.errors import response

# h11 refuses a larger header block itself (a plain 400); hyper's own limit is as large.
H11_MAX_HEADER_BLOCK = 8192 + 4096 * 100


class Gate:
    def __init__(self, app: ASGIApp, auth: _api.Auth, cors: _api.Cors) -> None:
        self.app, self.auth, self.cors = app, auth, cors

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        raw = scope["headers"]
        h = {k.decode("latin-1"): v.decode("latin-1") for k, v in raw}
        origin, method = h.get("origin"), scope["method"]
        try:
            _api.check_headers(len(raw), sum(len(k) + len(v) for k, v in raw))
        except _api.ApiError as e:
            return await response(e)(scope, receive, send)
        asked = h.get("access-control-request-method")
        if _api.Cors.is_preflight(method, origin, asked):
            status, headers, body = self.cors.preflight(
                origin, asked, h.get("access-control-request-headers"),
                "access-control-request-private-network" in h)
            return await Response(body, status, dict(headers))(scope, receive, send)
        try:
            self.auth.check(method, scope["path"], h.get("authorization"))
        except _api.ApiError as e:
            answer = response(e)
            answer.headers.update(dict(self.cors.response_headers(origin)) if origin else {})
            return await answer(scope, receive, send)
        if origin is None:
            return await self.app(scope, receive, send)
        extra = [(k.encode(), v.encode()) for k, v in self.cors.response_headers(origin)]

        async def send_with_cors(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *extra]
            await send(message)

        await self.app(scope, receive, send_with_cors)
