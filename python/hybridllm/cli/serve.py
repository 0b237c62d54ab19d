"""`hybridllm serve`: the OpenAI-compatible server.

With --rust-frontend (the production path): bind the port, start the engine worker, wait
until it is SERVING, then start the Rust frontend on the bound socket and supervise both.
Without it: the Python (FastAPI) server with the engine in-process.
"""

from __future__ import annotations

import argparse
import os
import signal
import ssl
import tempfile
import threading
import time
import urllib.request
from typing import Any

from hybridllm.config import EngineArgs
from hybridllm.entrypoints.rust_frontend import add_frontend_args, frontend_options


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("serve", help="Serve the OpenAI-compatible API.")
    parser.add_argument("model_tag", nargs="?", default=None,
                        help="Model folder or bundled name (default: the bundled model).")
    parser.add_argument("--rust-frontend", action="store_true",
                        help="Serve HTTP from the Rust frontend (production path).")
    EngineArgs.add_cli_args(parser)
    parser.add_argument("--shutdown-timeout", type=float, default=10.0,
                        help="Seconds in-flight requests may take to finish after SIGTERM.")
    parser.add_argument("--frontend-threads", type=int, default=None,
                        help="Rust frontend runtime threads (default: half the CPUs, at least "
                             "1; the engine worker shares the machine).")
    add_frontend_args(parser)
    parser.set_defaults(func=run)


def check_chat_template(path: str | None) -> None:
    """Refuse a broken --chat-template before loading anything."""
    if path is None:
        return
    from hybridllm.text.chat_template import compile_template

    with open(path, encoding="utf-8") as f:
        compile_template(f.read())


def run(args: argparse.Namespace) -> int:
    args.model = args.model or args.model_tag
    if (args.ssl_certfile is None) != (args.ssl_keyfile is None):
        print("hybridllm serve: --ssl-certfile and --ssl-keyfile go together", flush=True)
        return 2
    check_chat_template(args.chat_template)
    if args.rust_frontend:
        return run_rust_frontend(args)
    from hybridllm.entrypoints.openai.api_server import run_python_server

    return run_python_server(args)


def worker_argv(args: argparse.Namespace, engine_address: str) -> list[str]:
    import sys

    argv = [sys.executable, "-m", "hybridllm.cli.main", "worker",
            "--engine-address", engine_address, "--shutdown-timeout", str(args.shutdown_timeout)]
    defaults = vars(EngineArgs())
    for name, value in vars(EngineArgs.from_cli_args(args)).items():
        if value == defaults[name] or value is None:
            continue
        flag = "--" + name.replace("_", "-")
        if isinstance(value, bool):
            argv.append(flag if value else "--no-" + name.replace("_", "-"))
        else:
            argv += [flag, str(value)]
    return argv


def run_rust_frontend(args: argparse.Namespace) -> int:
    from hybridllm.entrypoints.rust_frontend import (
        RustFrontendProcessManager,
        bind_listen_socket,
        spawn,
        terminate,
    )
    from hybridllm.server.grpc_client import wait_until_serving

    sock = bind_listen_socket(args.host, args.port)  # the port is reserved from here on
    engine_address = "unix://" + os.path.join(tempfile.mkdtemp(prefix="hybridllm-"), "engine.sock")
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    # The worker needs no API key: not even in its environment.
    worker = spawn(worker_argv(args, engine_address),
                   env={k: v for k, v in os.environ.items() if k != "HYBRIDLLM_API_KEY"})
    options = frontend_options(args)
    if options.chat_template:
        options.chat_template = os.path.abspath(options.chat_template)
    frontend = RustFrontendProcessManager(sock, engine_address, options,
                                          threads=args.frontend_threads)
    try:
        if not wait_until_serving(engine_address, worker, stop):
            return 0 if stop.is_set() else _died("engine worker", worker.returncode)
        frontend.start()
        url = f"{'https' if args.ssl_certfile else 'http'}://{args.host}:{args.port}"
        if _wait_http_ready(url, frontend, stop):
            print(f"hybridllm: serving {url} (Rust frontend)", flush=True)
        while not stop.is_set():
            if worker.poll() is not None:
                return _died("engine worker", worker.returncode)
            if frontend.poll() is not None:
                return _died("Rust frontend", frontend.poll())
            stop.wait(0.5)
        return 0
    finally:
        frontend.stop(timeout=args.shutdown_timeout + 5)
        terminate(worker, timeout=args.shutdown_timeout + 5)
        sock.close()


def _died(what: str, code: int | None) -> int:
    print(f"hybridllm: {what} exited with status {code}; shutting down", flush=True)
    return 1


def _wait_http_ready(url: str, frontend: Any, stop: threading.Event) -> bool:
    # Our own child on our own socket: its certificate need not be one we can verify.
    context = ssl._create_unverified_context() if url.startswith("https") else None
    while not stop.is_set() and frontend.poll() is None:
        try:
            with urllib.request.urlopen(url + "/health", timeout=2, context=context) as resp:
                if resp.status == 200:
                    return True
        except OSError:
            pass
        time.sleep(0.1)
    return False
