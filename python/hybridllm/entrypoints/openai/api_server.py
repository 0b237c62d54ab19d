"""`hybridllm serve` without the Rust frontend: the FastAPI application (routers, auth, CORS,
error bodies, engine start-up) and uvicorn on the listening socket."""

from __future__ import annotations

import argparse
import asyncio
import hmac
import logging
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from hybridllm.entrypoints.engine_client import EngineClient
from hybridllm.entrypoints.openai import serving_chat, serving_completions, serving_misc
from hybridllm.entrypoints.openai.errors import UNAUTHORIZED, ApiError, internal
from hybridllm.entrypoints.openai.metrics import Metrics
from hybridllm.entrypoints.openai.state import AppState
from hybridllm.entrypoints.rust_frontend import ServeOptions, bind_listen_socket, frontend_options
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
    if template is not None:
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
            return ApiError(404, "Not Found").response()
        # axum answers a wrong method with an empty 405 and an Allow header.
        return Response(status_code=e.status_code, headers=e.headers)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, e: Exception) -> Response:
        logger.exception("unhandled error")
        return internal(str(e)).response()

    app.add_middleware(AuthMiddleware, keys=list(opts.api_keys))
    lists = (opts.allowed_origins, opts.allowed_methods, opts.allowed_headers)
    origins, methods, headers = (["*"] if "*" in v else v for v in lists)
    app.add_middleware(
        CORSMiddleware, allow_origins=origins, allow_methods=methods, allow_headers=headers,
        # Like tower-http: credentials only with explicit lists, never with wildcards.
        allow_credentials=opts.allow_credentials and "*" not in origins + methods + headers,
    )
    return app


def _engine_client(args: argparse.Namespace) -> EngineClient:
    from hybridllm.entrypoints.engine_client import GrpcEngineClient, InProcessEngineClient

    if args.connect_engine:
        return GrpcEngineClient(args.connect_engine, args.engine_connect_timeout)
    from hybridllm.config import EngineArgs

    args.model = getattr(args, "model", None) or getattr(args, "model_tag", None)
    engine_args = EngineArgs.from_cli_args(args)
    if isinstance(engine_args.served_model_name, list):  # nargs="+" here, a str in EngineArgs
        engine_args.served_model_name = (engine_args.served_model_name or [None])[0]
    return InProcessEngineClient.from_engine_args(engine_args)


def _listener(args: argparse.Namespace) -> socket.socket:
    if args.listen_fd is not None:
        sock = socket.socket(fileno=args.listen_fd)
    else:
        sock = bind_listen_socket(args.host, args.port)
    sock.listen(2048)
    sock.setblocking(False)
    return sock


def run_python_server(args: argparse.Namespace) -> int:
    """Serve the OpenAI API from this process (FastAPI + uvicorn) until SIGTERM/SIGINT."""
    import uvicorn

    options = frontend_options(args)
    # Bind before loading the engine so a busy port fails in a second, not after minutes.
    try:
        sock = _listener(args)
    except OSError as e:
        print(f"hybridllm serve: cannot listen on {args.host}:{args.port}: {e}", flush=True)
        return 1
    app = build_app(_engine_client(args), options)
    config = uvicorn.Config(app, log_level="warning", lifespan="on", access_log=False,
                            timeout_graceful_shutdown=int(options.shutdown_timeout_s) or None)
    server = uvicorn.Server(config)

    async def main() -> int:
        task = asyncio.ensure_future(server.serve(sockets=[sock]))
        while not server.started and not task.done():
            await asyncio.sleep(0.05)
        if server.started:
            host, port = sock.getsockname()[:2]
            shown = f"[{host}]" if ":" in host else host
            print(f"hybridllm: serving the OpenAI API on http://{shown}:{port}", flush=True)
        await task
        return 0 if server.started else 1

    return asyncio.run(main())
