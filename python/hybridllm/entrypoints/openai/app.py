"""The FastAPI application: routers, auth, CORS, error bodies, engine start-up (lifespan)."""

from __future__ import annotations

import hmac
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from hybridllm.entrypoints.engine_client import EngineClient
from hybridllm.entrypoints.openai import serving_chat, serving_completions, serving_misc
from hybridllm.entrypoints.openai.errors import UNAUTHORIZED, ApiError, internal, not_found
from hybridllm.entrypoints.openai.metrics import Metrics
from hybridllm.entrypoints.openai.state import AppState
from hybridllm.entrypoints.rust_frontend import ServeOptions
from hybridllm.text.chat_template import compile_template
from hybridllm.text.tokenizer import Tokenizer

logger = logging.getLogger("hybridllm.frontend")
OPEN_PATHS = ("/health", "/version")


def key_ok(keys: list[str], header: str | None) -> bool:
    if header is None or not header.startswith("Bearer "):
        return False
    token = header[len("Bearer "):].strip().encode()
    ok = False
    for k in keys:  # every key is compared, so timing does not tell which one matched
        ok |= hmac.compare_digest(k.encode(), token)
    return ok


class AuthMiddleware:
    """Everything but /health, /version and CORS preflight needs a key when keys are set."""

    def __init__(self, app: ASGIApp, keys: list[str]) -> None:
        self.app, self.keys = app, keys

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (scope["type"] != "http" or not self.keys or scope["method"] == "OPTIONS"
                or scope["path"] in OPEN_PATHS):
            return await self.app(scope, receive, send)
        header = dict(scope["headers"]).get(b"authorization")
        text = header.decode("latin-1") if header is not None else None
        if key_ok(self.keys, text):
            return await self.app(scope, receive, send)
        await ApiError(401, UNAUTHORIZED).response()(scope, receive, send)


async def build_state(engine: EngineClient, options: ServeOptions) -> AppState:
    """Everything that can fail before serving fails here, with a clear message."""
    override = None
    if options.chat_template is not None:
        try:
            override = Path(options.chat_template).read_text()
        except OSError as e:
            raise RuntimeError(f"cannot read chat template {options.chat_template}: {e}") from e
        compile_template(override)  # a broken one must fail at start-up
    info = await engine.wait_ready()
    tokenizer = Tokenizer(options.tokenizer_path or info.tokenizer_path)
    template = override if override is not None else (info.chat_template or None)
    if override is None and template is not None:
        compile_template(template)
    names = list(options.served_model_name) or [info.served_model_name or info.model_path]
    max_model_len = options.max_model_len or info.max_model_len
    state = AppState(
        options=options, engine=engine, tokenizer=tokenizer, template=template,
        model_info=info, served_names=names, max_model_len=max_model_len,
        vocab_size=max(info.vocab_size, tokenizer.vocab_size()), metrics=Metrics(),
    )
    logger.info("engine ready: model=%s max_model_len=%d", names[0], max_model_len)
    return state


def route_table(routes: list[Any]) -> set[tuple[str, str]]:
    """(method, path) of every registered route, through included routers."""
    out: set[tuple[str, str]] = set()
    for r in routes:
        inner = getattr(r, "original_router", None)  # FastAPI >= 0.16x wraps included routers
        if inner is not None:
            out |= route_table(inner.routes)
        elif isinstance(r, APIRoute):
            out |= {(m, r.path) for m in r.methods}
    return out


def build_app(engine: EngineClient, opts: ServeOptions | None = None) -> FastAPI:
    opts = opts or ServeOptions()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.hybridllm = await build_state(engine, opts)
        try:
            yield
        finally:
            await engine.close()

    app = FastAPI(lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    for module in (serving_chat, serving_completions, serving_misc):
        app.include_router(module.router)

    @app.exception_handler(ApiError)
    async def api_error(request: Request, e: ApiError) -> Response:
        return e.response()

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, e: StarletteHTTPException) -> Response:
        if e.status_code == 404:
            return not_found("Not Found").response()
        # axum answers a wrong method with an empty 405 and an Allow header.
        return Response(status_code=e.status_code, headers=e.headers)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, e: Exception) -> Response:
        logger.exception("unhandled error")
        return internal(str(e)).response()

    app.add_middleware(AuthMiddleware, keys=list(opts.api_keys))
    any_ = {"origins": "*" in opts.allowed_origins, "methods": "*" in opts.allowed_methods,
            "headers": "*" in opts.allowed_headers}
    app.add_middleware(
        CORSMiddleware,
        allow_origins=["*"] if any_["origins"] else opts.allowed_origins,
        allow_methods=["*"] if any_["methods"] else opts.allowed_methods,
        allow_headers=["*"] if any_["headers"] else opts.allowed_headers,
        # Like tower-http: credentials only with explicit lists, never with wildcards.
        allow_credentials=opts.allow_credentials and not any(any_.values()),
    )
    return app
