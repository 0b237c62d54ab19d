"""`hybridllm serve` without the Rust frontend: shared serve flags, and uvicorn start-up.

`add_frontend_args` adds the flags both frontends share; `frontend_options(args)` turns them
into the dict the Rust binary takes as `--args-json` (rust-frontend/src/config.rs), which is
also what `build_app` takes, so one dict serves both.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import socket
from typing import Any

from hybridllm.entrypoints.openai.app import build_app
from hybridllm.entrypoints.rust_frontend import bind_listen_socket

logger = logging.getLogger("hybridllm.frontend")


def _list_arg(value: str) -> list[str]:
    """vLLM takes JSON lists (`--allowed-origins '["*"]'`); a comma list works too."""
    value = value.strip()
    if value.startswith("["):
        parsed = json.loads(value)
        if not isinstance(parsed, list) or not all(isinstance(x, str) for x in parsed):
            raise argparse.ArgumentTypeError("expected a JSON list of strings")
        return parsed
    return [v.strip() for v in value.split(",") if v.strip()]


def add_frontend_args(parser: argparse.ArgumentParser) -> None:
    """Serve options shared by both frontends; flags the parser already has are left alone
    (--served-model-name and --max-model-len come from EngineArgs)."""
    have = set(parser._option_string_actions)  # noqa: SLF001 - argparse has no public query

    def add(flag: str, **kw: Any) -> None:
        if flag not in have:
            parser.add_argument(flag, **kw)

    add("--host", default="0.0.0.0", help="Address to listen on.")
    add("--port", type=int, default=8000)
    add("--listen-fd", type=int, default=None,
        help="An already bound TCP socket inherited from the launcher.")
    add("--api-key", action="append", default=None,
        help="Required Bearer key (repeatable; also env HYBRIDLLM_API_KEY, comma-separated).")
    add("--allowed-origins", type=_list_arg, default=["*"])
    add("--allowed-methods", type=_list_arg, default=["*"])
    add("--allowed-headers", type=_list_arg, default=["*"])
    add("--allow-credentials", action="store_true")
    add("--served-model-name", nargs="+", default=None)
    add("--max-model-len", type=int, default=None)
    add("--max-request-body-bytes", type=int, default=32 << 20,
        help="Larger request bodies get 413.")
    add("--chat-template", default=None, help="A Jinja file overriding the model's template.")
    add("--max-log-len", type=int, default=0, help="Prompt token ids logged per request.")
    add("--disable-log-requests", action="store_true")
    add("--engine-connect-timeout", type=float, default=60.0,
        help="Seconds to wait for an external engine worker to answer at start-up.")
    add("--frontend-shutdown-timeout", type=float, default=30.0,
        help="Seconds in-flight HTTP requests may take to finish after SIGTERM.")
    add("--connect-engine", default=None, metavar="ADDRESS",
        help="Use the running `hybridllm worker` at ADDRESS (unix:///path.sock or host:port) "
             "instead of loading the engine in this process.")


def _api_keys(args: argparse.Namespace) -> list[str]:
    keys = list(getattr(args, "api_key", None) or [])
    env = os.environ.get("HYBRIDLLM_API_KEY", "")
    keys += [k.strip() for k in env.split(",") if k.strip()]
    return keys


def frontend_options(args: argparse.Namespace) -> dict[str, Any]:
    """The `--args-json` dict of the Rust frontend, from the parsed serve flags."""
    smn = getattr(args, "served_model_name", None)
    return {
        "served_model_name": [smn] if isinstance(smn, str) else list(smn or []),
        "max_model_len": getattr(args, "max_model_len", None),
        "api_keys": _api_keys(args),
        "allowed_origins": args.allowed_origins,
        "allowed_methods": args.allowed_methods,
        "allowed_headers": args.allowed_headers,
        "allow_credentials": args.allow_credentials,
        "max_request_body_bytes": args.max_request_body_bytes,
        "chat_template": args.chat_template,
        "max_log_len": args.max_log_len,
        "engine_connect_timeout_s": args.engine_connect_timeout,
        "disable_log_requests": args.disable_log_requests,
        "shutdown_timeout_s": args.frontend_shutdown_timeout,
    }


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
                            timeout_graceful_shutdown=int(options["shutdown_timeout_s"]) or None)
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
