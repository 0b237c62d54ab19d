"""`hybridllm serve` without the Rust frontend: uvicorn start-up (the serve flags and their
`ServeOptions` come from the Rust-frontend launcher, entrypoints/rust_frontend.py)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import socket
from typing import Any

from hybridllm.entrypoints.openai.app import build_app
from hybridllm.entrypoints.rust_frontend import bind_listen_socket, frontend_options

logger = logging.getLogger("hybridllm.frontend")


def _engine_client(args: argparse.Namespace) -> Any:
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
