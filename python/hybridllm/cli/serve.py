"""`hybridllm serve`: the OpenAI-compatible server.

With --rust-frontend (the production path): bind the port, start the engine worker, wait
until it is SERVING, then start the Rust frontend on the bound socket and supervise both.
Without it: the Python (FastAPI) server with the engine in-process.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import ssl
import tempfile
import threading
import time
import urllib.request
from typing import Any

from hybridllm.config import EngineArgs
from hybridllm.entrypoints.rust_frontend import (
    add_frontend_args,
    exit_with_launcher,
    frontend_options,
)


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
    add_parallel_args(parser)
    parser.set_defaults(func=run)


def add_parallel_args(parser: argparse.ArgumentParser) -> None:
    """vLLM's data-parallel flags, and the supervisor's health probe."""
    parser.add_argument("--data-parallel-size", "-dp", type=int, default=1,
                        help="Engine replicas; with --data-parallel-external-lb one complete "
                             "server per rank on --port + rank.")
    parser.add_argument("--data-parallel-external-lb", "--data-parallel-multi-port-external-lb",
                        dest="data_parallel_external_lb", action="store_true",
                        help="One server per rank behind your own load balancer, supervised "
                             "by this process (aggregated /health on --supervisor-port).")
    parser.add_argument("--data-parallel-rank", type=int, default=None,
                        help="This server's rank (set by the supervisor for its children).")
    parser.add_argument("--routing", choices=["least-load", "prefix"], default="least-load",
                        help="With --rust-frontend and --data-parallel-size N: send each "
                             "request to the worker with the fewest outstanding tokens, or "
                             "(prefix) to the one that served the longest matching prompt "
                             "prefix unless it is much busier.")
    parser.add_argument("--data-parallel-keep-alive", action="store_true",
                        help="With --data-parallel-size N: when a worker (or, with "
                             "--data-parallel-external-lb, a rank) dies, serve on with the "
                             "others instead of shutting down; exit non-zero when none is left.")
    parser.add_argument("--headless", action="store_true",
                        help="On a node other than 0 (--node-rank >= 1): run only this node's "
                             "tensor-parallel ranks, no API server.")
    parser.add_argument("--supervisor-port", type=int, default=None,
                        help="The supervisor's aggregated /health (default: --port + N).")
    parser.add_argument("--health-probe-interval", type=float, default=1.0,
                        help="Seconds between the supervisor's probes of each rank.")
    parser.add_argument("--health-probe-timeout", type=float, default=1.0)
    parser.add_argument("--health-failure-threshold", type=int, default=3,
                        help="Consecutive failed probes after which a rank is dead and the "
                             "supervisor stops every rank and exits non-zero.")


class ServeModeError(ValueError):
    pass


def select_mode(args: argparse.Namespace) -> str:
    """The one place that decides how `serve` runs: "rust" (the Rust frontend over a worker),
    "dp-supervisor" (one server per data-parallel rank), "python" (the fallback frontend) or
    "headless" (a node other than 0 of a multi-node tensor-parallel engine: its ranks only).
    Combinations that cannot work are refused, naming both flags."""
    dp, tp = args.data_parallel_size, args.tensor_parallel_size
    if dp < 1:
        raise ServeModeError(f"--data-parallel-size must be at least 1, got {dp}")
    if tp < 1:
        raise ServeModeError(f"--tensor-parallel-size must be at least 1, got {tp}")
    if args.headless or args.node_rank != 0:
        if not (args.headless and args.node_rank != 0):
            raise ServeModeError(f"--headless and --node-rank {args.node_rank} go together: "
                                 "node 0 serves the API, every other node runs headless")
        if args.rust_frontend or dp != 1:
            flag = "--rust-frontend" if args.rust_frontend else "--data-parallel-size"
            raise ServeModeError(f"--headless and {flag} cannot go together: a headless node "
                                 "serves no API (node 0 does)")
        return "headless"
    if dp > 1 and (args.nnodes != 1 or args.master_port is not None):
        flag = "--nnodes" if args.nnodes != 1 else "--master-port"
        raise ServeModeError(f"--data-parallel-size {dp} and {flag} cannot go together: each "
                             "data-parallel rank's tensor-parallel group meets on its own port")
    if dp == 1:
        if args.data_parallel_keep_alive and args.data_parallel_rank is None:
            raise ServeModeError("--data-parallel-keep-alive needs --data-parallel-size > 1 "
                                 "(there is no other worker to serve on with)")
        return "rust" if args.rust_frontend else "python"
    if not args.data_parallel_external_lb:
        if not args.rust_frontend:
            raise ServeModeError(f"--data-parallel-size {dp} needs --rust-frontend (one "
                                 "frontend over N workers) or --data-parallel-external-lb (one "
                                 "server per rank behind a load balancer)")
        if args.connect_engine is not None:
            raise ServeModeError(f"--data-parallel-size {dp} and --connect-engine cannot go "
                                 "together: the frontend starts its own workers")
        return "rust"
    for flag, value in (("--connect-engine", args.connect_engine),
                        ("--listen-fd", args.listen_fd), ("--uds", args.uds),
                        ("--data-parallel-rank", args.data_parallel_rank)):
        if value is not None:
            raise ServeModeError(f"--data-parallel-external-lb and {flag} cannot go together: "
                                 "every rank starts its own engine and socket")
    return "dp-supervisor"


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
    if args.uds is not None and args.ssl_certfile is not None:
        print("hybridllm serve: --uds serves plain HTTP: drop --ssl-certfile", flush=True)
        return 2
    check_chat_template(args.chat_template)
    try:
        mode = select_mode(args)
    except ServeModeError as e:
        print(f"hybridllm serve: {e}", flush=True)
        return 2
    if args.tensor_parallel_size > 1 or args.nnodes > 1:
        try:  # a shape the ranks cannot split is refused here, before any process starts
            EngineArgs.from_cli_args(args).resolve()
        except ValueError as e:
            print(f"hybridllm serve: {e}", flush=True)
            return 2
    print(f"hybridllm serve: mode {mode}" + ("" if args.data_parallel_rank is None else
                                             f" (data-parallel rank {args.data_parallel_rank})"),
          flush=True)
    exit_with_launcher()  # a supervisor's rank leaves with it
    if mode == "dp-supervisor":
        return run_dp_supervisor(args)
    if mode == "headless":
        from hybridllm.executor.tp_worker import run_headless

        return run_headless(EngineArgs.from_cli_args(args).resolve())
    if mode == "rust":
        return run_rust_frontend(args)
    from hybridllm.entrypoints.openai.api_server import run_python_server

    return run_python_server(args)


def run_dp_supervisor(args: argparse.Namespace) -> int:
    from hybridllm.entrypoints.dp_supervisor import DPSupervisor, HealthProbe

    dp = args.data_parallel_size
    probe = HealthProbe(args.health_probe_interval, args.health_probe_timeout,
                        args.health_failure_threshold)
    port = args.supervisor_port if args.supervisor_port is not None else args.port + dp
    return DPSupervisor(args.raw_argv, dp, args.host, args.port, port, probe,
                        args.shutdown_timeout, args.tensor_parallel_size,
                        keep_alive=args.data_parallel_keep_alive).run()


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
        elif isinstance(value, dict):  # speculative_config: the worker reads JSON
            argv += [flag, json.dumps(value)]
        else:
            argv += [flag, str(value)]
    return argv


def run_rust_frontend(args: argparse.Namespace) -> int:
    from hybridllm.entrypoints.rust_frontend import (
        RustFrontendProcessManager,
        bind_listen_socket,
        listen_url,
        spawn,
        wait_or_kill,
    )
    from hybridllm.server.grpc_client import wait_until_serving

    sock = bind_listen_socket(args.host, args.port, args.uds)  # reserved from here on
    n = args.data_parallel_size
    folder = tempfile.mkdtemp(prefix="hybridllm-")
    addresses = ["unix://" + os.path.join(folder, "engine.sock" if n == 1 else f"engine-{r}.sock")
                 for r in range(n)]
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    workers = [spawn(worker_argv(args, a), env=_worker_env(r, n, args.tensor_parallel_size))
               for r, a in enumerate(addresses)]
    options = frontend_options(args)
    if options.chat_template:
        options.chat_template = os.path.abspath(options.chat_template)
    keep_alive = args.data_parallel_keep_alive
    frontend = RustFrontendProcessManager(sock, addresses, options, threads=args.frontend_threads,
                                          routing=args.routing, keep_alive=keep_alive)
    try:
        for r, (a, w) in enumerate(zip(addresses, workers)):
            if not wait_until_serving(a, w, stop):
                return 0 if stop.is_set() else _died(_name(r, n), w.returncode)
        frontend.start()
        url = listen_url(sock, args.ssl_certfile is not None)
        if _wait_http_ready(url, frontend, stop, args.uds):
            more = "" if n == 1 else f", {n} engine workers, routing {args.routing}"
            print(f"hybridllm: serving {url} (Rust frontend{more})", flush=True)
        serving = set(range(n))
        while not stop.is_set():
            for r in sorted(serving):
                if workers[r].poll() is None:
                    continue
                if not keep_alive or len(serving) == 1:
                    return _died(_name(r, n), workers[r].returncode)
                serving.discard(r)
                print(f"hybridllm: {_name(r, n)} exited with status {workers[r].returncode}; "
                      f"serving on with {len(serving)} of {n} (--data-parallel-keep-alive)",
                      flush=True)
            if frontend.poll() is not None:
                return _died("Rust frontend", frontend.poll())
            stop.wait(0.5)
        return 0
    finally:
        # Our copy of the listening socket would keep taking connections into its backlog
        # that nobody accepts while the frontend drains: close it, so that they are refused.
        sock.close()
        frontend.stop(timeout=options.shutdown_timeout_s + 5)
        for w in workers:  # all at once: they drain in parallel
            if w.poll() is None:
                w.send_signal(signal.SIGTERM)
        for w in workers:
            wait_or_kill(w, timeout=args.shutdown_timeout + 5)


def _name(rank: int, n: int) -> str:
    return "engine worker" if n == 1 else f"engine worker {rank}"


def _worker_env(rank: int, n: int, tp: int) -> dict[str, str]:
    """The worker needs no API key: not even in its environment. With several workers each
    gets its slice of the GPUs and its share of the cores."""
    from hybridllm.entrypoints.dp_supervisor import rank_env

    env = rank_env(rank, n, tp) if n > 1 else dict(os.environ)
    env.pop("HYBRIDLLM_API_KEY", None)
    return env


def _died(what: str, code: int | None) -> int:
    print(f"hybridllm: {what} exited with status {code}; shutting down", flush=True)
    return 1


def _wait_http_ready(url: str, frontend: Any, stop: threading.Event,
                     uds: str | None = None) -> bool:
    # Our own child on our own socket: its certificate need not be one we can verify.
    context = ssl._create_unverified_context() if url.startswith("https") else None
    while not stop.is_set() and frontend.poll() is None:
        try:
            if uds is not None:
                if _unix_health(uds) == 200:
                    return True
            else:
                with urllib.request.urlopen(url + "/health", timeout=2,
                                            context=context) as resp:
                    if resp.status == 200:
                        return True
        except OSError:
            pass
        time.sleep(0.1)
    return False


def _unix_health(path: str) -> int:
    """GET /health over the Unix socket at `path`: its status."""
    import http.client
    import socket

    conn = http.client.HTTPConnection("localhost", timeout=2)
    conn.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.sock.settimeout(2)
    try:
        conn.sock.connect(path)
        conn.request("GET", "/health")
        return conn.getresponse().status
    finally:
        conn.close()
