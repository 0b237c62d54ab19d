"""`hybridllm serve` without the Rust frontend: the FastAPI application (routers, auth, CORS,
error bodies, engine start-up) and uvicorn on the listening socket."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import signal
import socket
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from fastapi import FastAPI
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import Request
from starlette.responses import Response

from hybridllm import _api
from hybridllm.entrypoints.engine_watchdog import EngineWatchdog
from hybridllm.entrypoints.openai import (
    serving_chat,
    serving_completions,
    serving_embedding,
    serving_invocations,
    serving_misc,
    serving_responses,
)
from hybridllm.entrypoints.openai.disconnect import ClientDisconnected
from hybridllm.entrypoints.openai.errors import response
from hybridllm.entrypoints.openai.gate import H11_MAX_HEADER_BLOCK, Gate
from hybridllm.entrypoints.openai.state import AppState
from hybridllm.entrypoints.rust_frontend import (
    ServeOptions,
    bind_listen_socket,
    frontend_options,
    listen_url,
)
from hybridllm.server.engine_client import EngineClient

logger = logging.getLogger("hybridllm.frontend")


async def build_state(engine: EngineClient, options: ServeOptions) -> AppState:
    """Everything that can fail before serving fails here, with a clear message."""
    info = await engine.wait_ready()
    try:
        api = _api.Context.from_model(
            info, served_model_name=list(options.served_model_name),
            max_model_len=options.max_model_len, tokenizer_path=options.tokenizer_path,
            chat_template=options.chat_template, max_tokens_limit=options.max_tokens_limit,
            max_beam_width=options.max_beam_width,
            structured_outputs_config=json.dumps(options.structured_outputs_config),
            tool_call_parser=options.tool_call_parser, reasoning_parser=options.reasoning_parser,
            enable_auto_tool_choice=options.enable_auto_tool_choice,
            enable_force_include_usage=options.enable_force_include_usage,
            enable_prompt_tokens_details=options.enable_prompt_tokens_details)
    except ValueError as e:
        raise RuntimeError(str(e)) from None
    state = AppState(
        options=options, engine=engine, api=api, tokenizer=api.tokenizer, model_info=info,
        metrics=_api.Metrics(options.metrics_prefix), auth=auth(options),
        responses=_api.ResponseStore(options.responses_store_size),
    )
    for warning in api.warnings:
        logger.warning("%s", warning)
    logger.info("engine ready: model=%s max_model_len=%d", api.model_name, api.max_model_len)
    return state


def auth(opts: ServeOptions) -> _api.Auth:
    return _api.Auth(list(opts.api_keys), opts.metrics_no_auth, not opts.disable_playground)


def build_app(engine: EngineClient, opts: ServeOptions | None = None,
              ready: Callable[[], None] = lambda: None) -> FastAPI:
    """`ready` is called once the engine answered and the state is built."""
    opts = opts or ServeOptions()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.hybridllm = await build_state(engine, opts)
        ready()
        try:
            yield
        finally:
            await engine.close()

    app = FastAPI(lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    for module in (serving_chat, serving_completions, serving_embedding, serving_responses,
                   serving_invocations, serving_misc):
        app.include_router(module.router)
    if not opts.disable_playground:
        app.include_router(serving_misc.playground_router)

    @app.exception_handler(_api.ApiError)
    async def api_error(request: Request, e: _api.ApiError) -> Response:
        return response(e)

    @app.exception_handler(ClientDisconnected)
    async def hung_up(request: Request, e: ClientDisconnected) -> Response:
        return Response(status_code=499)  # nobody is left to read it (nginx's code)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, e: StarletteHTTPException) -> Response:
        if e.status_code == 404:
            return response(_api.error(404, "Not Found"))
        # axum answers a wrong method with an empty 405 and an Allow header.
        return Response(status_code=e.status_code, headers=e.headers)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, e: Exception) -> Response:
        logger.exception("unhandled error")
        return response(_api.error(500, str(e)))

    cors = _api.Cors(list(opts.allowed_origins), list(opts.allowed_methods),
                     list(opts.allowed_headers), opts.allow_credentials)
    app.add_middleware(Gate, auth=auth(opts), cors=cors,
                       request_ids=opts.enable_request_id_headers, root_path=opts.root_path)
    return app


def run_python_server(args: argparse.Namespace) -> int:
    """Serve the OpenAI API from this process (FastAPI + uvicorn) until SIGTERM/SIGINT."""
    import uvicorn

    from hybridllm.config import EngineArgs
    from hybridllm.engine.async_llm_engine import AsyncLLMEngine
    from hybridllm.server.engine_client import GrpcEngineClient, InProcessEngineClient

    options = frontend_options(args)
    # Bind before loading the engine so a busy port fails in a second, not after minutes.
    try:
        sock = (socket.socket(fileno=args.listen_fd) if args.listen_fd is not None
                else bind_listen_socket(args.host, args.port, args.uds))
        sock.listen(2048)
    except OSError as e:
        print(f"hybridllm serve: cannot listen on {args.host}:{args.port}: {e}", flush=True)
        return 1
    if args.connect_engine:
        engine: EngineClient = GrpcEngineClient(args.connect_engine, args.engine_connect_timeout)
    else:
        llm = AsyncLLMEngine.from_engine_args(EngineArgs.from_cli_args(args), detokenize=False)
        engine = InProcessEngineClient(llm, llm.engine.config.served_model_name)

    def ready() -> None:  # the socket listens already: connections wait for uvicorn's accept
        url = listen_url(sock, options.ssl_certfile is not None)
        print(f"hybridllm: serving the OpenAI API on {url}", flush=True)

    tls = {"ssl_certfile": options.ssl_certfile, "ssl_keyfile": options.ssl_keyfile}
    config = uvicorn.Config(build_app(engine, options, ready), log_level="warning",
                            lifespan="on", access_log=False, http="h11",
                            h11_max_incomplete_event_size=H11_MAX_HEADER_BLOCK, **tls,
                            timeout_graceful_shutdown=int(options.shutdown_timeout_s) or None)
    server = uvicorn.Server(config)
    # uvicorn re-raises a caught SIGTERM/SIGINT after its graceful shutdown, through the
    # handlers that were there before: a no-op one makes a drained server exit 0.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: None)
    watchdog = EngineWatchdog(engine, server) if args.connect_engine else None

    async def serve() -> None:
        watch = asyncio.create_task(watchdog.run()) if watchdog else None
        await server.serve(sockets=[sock])
        if watch:
            watch.cancel()

    asyncio.run(serve())
    return 0 if server.started and not (watchdog and watchdog.lost) else 1
