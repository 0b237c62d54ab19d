"""What runs before any handler, each rule the core's (limits.rs, cors.rs, auth.rs): the header
limits (431), CORS (a preflight answered whole; the policy's headers on every other answer
to a request that names its origin), then the API key (401). With
--enable-request-id-headers every answer carries X-Request-Id: the request's, or a new one
(the core's) that the request then carries, so that it names the response."""

from __future__ import annotations

from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from hybridllm import _api
from hybridllm.entrypoints.openai.errors import response

# h11 refuses a larger header block itself (a plain 400); hyper's own limit is as large.
H11_MAX_HEADER_BLOCK = 8192 + 4096 * 100


class Gate:
    def __init__(self, app: ASGIApp, auth: _api.Auth, cors: _api.Cors,
                 request_ids: bool = False, root_path: str | None = None) -> None:
        self.app, self.auth, self.cors, self.request_ids = app, auth, cors, request_ids
        self.root = _api.normalise_root_path(root_path)  # --root-path (root_path.rs)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path = self.root and _api.route_path(self.root, scope["path"])
        if path:
            scope = {**scope, "path": path, "root_path": scope.get("root_path", "") + self.root}
        raw = scope["headers"]
        h = {k.decode("latin-1"): v.decode("latin-1") for k, v in raw}
        origin, method = h.get("origin"), scope["method"]
        extra: list[tuple[bytes, bytes]] = []  # headers of every answer from here on

        async def send_extra(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *extra]
            await send(message)

        if self.request_ids:
            rid = h.get("x-request-id")
            if rid is None:
                rid = _api.new_request_id()
                scope = {**scope, "headers": [*raw, (b"x-request-id", rid.encode())]}
            extra.append((b"x-request-id", rid.encode("latin-1")))
        try:
            _api.check_headers(len(raw), sum(len(k) + len(v) for k, v in raw))
        except _api.ApiError as e:
            return await response(e)(scope, receive, send_extra)
        asked = h.get("access-control-request-method")
        if _api.Cors.is_preflight(method, origin, asked):
            status, headers, body = self.cors.preflight(
                origin, asked, h.get("access-control-request-headers"),
                "access-control-request-private-network" in h)
            return await Response(body, status, dict(headers))(scope, receive, send_extra)
        if origin is not None:
            extra += [(k.encode(), v.encode()) for k, v in self.cors.response_headers(origin)]
        try:
            self.auth.check(method, scope["path"], h.get("authorization"))
        except _api.ApiError as e:
            return await response(e)(scope, receive, send_extra)
        await self.app(scope, receive, send_extra)
