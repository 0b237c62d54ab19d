"""RustFrontendProcessManager: runs the Rust HTTP frontend on a socket bound by Python; and
the serve flags both frontends take (`add_frontend_args`), turned into the Rust binary's
`--args-json` (`ServeOptions`, rust-frontend/src/config.rs), which the Python fallback takes too.

Binding in Python first reserves the port before the model loads; the child inherits the
bound socket (pass_fds) and calls listen() itself. Children ask for a parent-death signal
themselves (HYBRIDLLM_PARENT_PID), so no orphan outlives a killed `serve`: the launcher has
gRPC threads by the time it starts the frontend, and running code in a forked child of a
threaded process (a preexec_fn) is what once aborted the frontend before it could exec.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

_PR_SET_PDEATHSIG = 1
PARENT_PID_ENV = "HYBRIDLLM_PARENT_PID"


def _list_arg(value: str) -> list[str]:
    """vLLM takes JSON lists (`--allowed-origins '["*"]'`); a comma list works too."""
    value = value.strip()
    if value.startswith("["):
        parsed = json.loads(value)
        if not isinstance(parsed, list) or not all(isinstance(x, str) for x in parsed):
            raise argparse.ArgumentTypeError("expected a JSON list of strings")
        return parsed
    return [v.strip() for v in value.split(",") if v.strip()]


def _positive_int(value: str) -> int:
    n = int(value)
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {n}")
    return n


def _json_object(value: str) -> dict[str, Any]:
    """A JSON object (its keys are checked by the API core at start-up)."""
    try:
        parsed = json.loads(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"expected a JSON object: {e}") from None
    if not isinstance(parsed, dict):
        raise argparse.ArgumentTypeError("expected a JSON object")
    return parsed


def _non_negative_int(value: str) -> int:
    n = int(value)
    if n < 0:
        raise argparse.ArgumentTypeError(f"must be at least 0, got {n}")
    return n


def add_frontend_args(parser: argparse.ArgumentParser) -> None:
    """Serve options shared by both frontends; flags the parser already has are left alone
    (--served-model-name and --max-model-len come from EngineArgs)."""
    have = set(parser._option_string_actions)  # noqa: SLF001 - argparse has no public query

    def add(flag: str, **kw: Any) -> None:
        if flag not in have:
            parser.add_argument(flag, **kw)

    add("--host", default="0.0.0.0", help="Address to listen on.")
    add("--port", type=int, default=8000)
    add("--uds", default=None,
        help="Serve on this Unix socket path instead of --host/--port (vLLM's flag; plain "
             "HTTP, guarded by the file's permissions).")
    add("--root-path", default=None,
        help="Served behind a proxy under this path prefix: requests are served with or "
             "without it (the proxy may strip it or pass it on).")
    add("--listen-fd", type=int, default=None,
        help="An already bound TCP socket inherited from the launcher.")
    add("--api-key", action="append", default=None,
        help="Required Bearer key (repeatable; also env HYBRIDLLM_API_KEY, comma-separated, "
             "which keeps it off the command line).")
    add("--metrics-no-auth", action="store_true",
        help="Serve /metrics without an API key (for a scraper on a private network).")
    add("--allowed-origins", type=_list_arg, default=["*"])
    add("--allowed-methods", type=_list_arg, default=["*"])
    add("--allowed-headers", type=_list_arg, default=["*"])
    add("--allow-credentials", action="store_true")
    add("--served-model-name", nargs="+", default=None)
    add("--max-model-len", type=int, default=None)
    add("--max-request-body-bytes", type=int, default=32 << 20,
        help="Larger request bodies get 413.")
    add("--max-tokens-limit", type=_positive_int, default=None,
        help="Operator cap on generated tokens: requests that set no max_tokens are clamped "
             "to it, requests asking for more get 400.")
    add("--responses-store-size", type=_non_negative_int, default=1000,
        help="/v1/responses objects kept for retrieval and previous_response_id (least "
             "recently used dropped first; 0 keeps none).")
    add("--disable-playground", action="store_true",
        help="Serve no web playground at GET / (it needs no key to load; its calls do).")
    add("--max-beam-width", type=_positive_int, default=16,
        help="Largest n of a use_beam_search request (400 above it).")
    add("--structured-outputs-config", type=_json_object, default=None,
        help="vLLM's structured-outputs options, a JSON object: backend (auto, guidance or "
             "llguidance), disable_any_whitespace, disable_additional_properties, and this "
             "server's limits max_bytes, max_depth and max_compile_ms (docs/"
             "structured_outputs.md).")
    add("--tool-call-parser", default=None,
        choices=["hermes", "llama3_json", "pythonic", "mistral"],
        help="How the model writes tool calls: its calls are read into tool_calls "
             "(docs/tool_calling.md).")
    add("--enable-auto-tool-choice", action="store_true",
        help="Serve tool_choice \"auto\": the model's own calls are parsed with "
             "--tool-call-parser (required and named choices need neither flag).")
    add("--reasoning-parser", default=None, choices=["deepseek_r1", "qwen3"],
        help="How the model marks its reasoning (<think>...</think>): chat replies carry it "
             "in message.reasoning and delta.reasoning, apart from content "
             "(docs/tool_calling.md).")
    add("--enable-force-include-usage", action="store_true",
        help="Every stream ends with a usage chunk, as if stream_options.include_usage were "
             "set (vLLM's flag).")
    add("--enable-prompt-tokens-details", action="store_true",
        help="usage.prompt_tokens_details.cached_tokens: the prompt tokens found in the prefix "
             "cache (null when none or without this flag, as vLLM's).")
    add("--enable-server-load-tracking", action="store_true",
        help="GET /load answers the number of generation requests in flight (0 without this "
             "flag, as vLLM's).")
    add("--metrics-prefix", default="hybridllm",
        help="/metrics families are named <prefix>:... ('vllm': the names dashboards and "
             "autoscalers written for vLLM read).")
    add("--enable-request-id-headers", action="store_true",
        help="Every response carries X-Request-Id: the request's, or a new one, which then is "
             "the request's id (a request's X-Request-Id always names its response: "
             "chatcmpl-<id>).")
    add("--ssl-keyfile", default=None, help="PEM private key: serve HTTPS.")
    add("--ssl-certfile", default=None, help="PEM certificate (chain): serve HTTPS.")
    add("--chat-template", default=None, help="A Jinja file overriding the model's template.")
    add("--max-log-len", type=int, default=0, help="Prompt token ids logged per request.")
    add("--disable-log-requests", action="store_true")
    add("--engine-connect-timeout", type=float, default=60.0,
        help="Seconds to wait for an external engine worker to answer at start-up.")
    add("--frontend-shutdown-timeout", type=float, default=None,
        help="Older spelling, HTTP frontend only: when given it wins over --shutdown-timeout "
             "for the frontend's drain (the worker keeps --shutdown-timeout).")
    add("--header-read-timeout", type=float, default=10.0,
        help="Rust frontend: seconds a connection has to send a whole request head, and the "
             "longest a keep-alive connection may idle between requests (hyper's "
             "header_read_timeout); a slowloris is closed after it. 0 disables it.")
    add("--send-timeout", type=float, default=60.0,
        help="Rust frontend: seconds a write to a client may make no progress before the "
             "connection is closed and its request aborted (a client that stopped reading "
             "its stream; nginx's send_timeout). 0 disables it.")
    add("--connect-engine", default=None, metavar="ADDRESS",
        help="Use the running `hybridllm worker` at ADDRESS (unix:///path.sock or host:port) "
             "instead of loading the engine in this process.")


KEYS_JSON_ENV = "HYBRIDLLM_FRONTEND_API_KEYS"  # how the Rust frontend gets the keys


def _api_keys(args: argparse.Namespace) -> list[str]:
    keys = list(getattr(args, "api_key", None) or [])
    env = os.environ.get("HYBRIDLLM_API_KEY", "")
    keys += [k.strip() for k in env.split(",") if k.strip()]
    return keys


@dataclass
class ServeOptions:
    """The `--args-json` schema of the Rust frontend (rust-frontend/src/config.rs)."""

    served_model_name: list[str] = field(default_factory=list)
    max_model_len: int | None = None
    api_keys: list[str] = field(default_factory=list)
    metrics_no_auth: bool = False
    allowed_origins: list[str] = field(default_factory=lambda: ["*"])
    allowed_methods: list[str] = field(default_factory=lambda: ["*"])
    allowed_headers: list[str] = field(default_factory=lambda: ["*"])
    allow_credentials: bool = False
    max_request_body_bytes: int = 32 << 20
    chat_template: str | None = None  # a path
    tokenizer_path: str | None = None
    max_log_len: int = 0
    engine_connect_timeout_s: float = 60.0
    disable_log_requests: bool = False
    shutdown_timeout_s: float = 30.0
    header_read_timeout_s: float = 10.0
    send_timeout_s: float = 60.0
    max_tokens_limit: int | None = None
    responses_store_size: int = 1000
    disable_playground: bool = False
    max_beam_width: int = 16
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    structured_outputs_config: dict[str, Any] | None = None
    tool_call_parser: str | None = None
    enable_auto_tool_choice: bool = False
    reasoning_parser: str | None = None
    enable_force_include_usage: bool = False
    enable_prompt_tokens_details: bool = False
    enable_server_load_tracking: bool = False
    root_path: str | None = None
    metrics_prefix: str = "hybridllm"
    enable_request_id_headers: bool = False


def shutdown_timeout(args: argparse.Namespace) -> float:
    """One flag governs the drain after SIGTERM, --shutdown-timeout; the older
    --frontend-shutdown-timeout still works, and wins for the HTTP frontend when given."""
    if args.frontend_shutdown_timeout is not None:
        return float(args.frontend_shutdown_timeout)
    return float(getattr(args, "shutdown_timeout", ServeOptions.shutdown_timeout_s))


def frontend_options(args: argparse.Namespace) -> ServeOptions:
    """The frontend's options from the parsed serve flags."""
    smn = getattr(args, "served_model_name", None)
    return ServeOptions(
        served_model_name=[smn] if isinstance(smn, str) else list(smn or []),
        max_model_len=getattr(args, "max_model_len", None),
        api_keys=_api_keys(args),
        metrics_no_auth=args.metrics_no_auth,
        allowed_origins=args.allowed_origins,
        allowed_methods=args.allowed_methods,
        allowed_headers=args.allowed_headers,
        allow_credentials=args.allow_credentials,
        max_request_body_bytes=args.max_request_body_bytes,
        chat_template=args.chat_template,
        max_log_len=args.max_log_len,
        engine_connect_timeout_s=args.engine_connect_timeout,
        disable_log_requests=args.disable_log_requests,
        shutdown_timeout_s=shutdown_timeout(args),
        header_read_timeout_s=args.header_read_timeout,
        send_timeout_s=args.send_timeout,
        max_tokens_limit=args.max_tokens_limit,
        responses_store_size=args.responses_store_size,
        disable_playground=args.disable_playground,
        max_beam_width=args.max_beam_width,
        ssl_certfile=_abspath(args.ssl_certfile),
        ssl_keyfile=_abspath(args.ssl_keyfile),
        structured_outputs_config=getattr(args, "structured_outputs_config", None),
        tool_call_parser=getattr(args, "tool_call_parser", None),
        enable_auto_tool_choice=getattr(args, "enable_auto_tool_choice", False),
        reasoning_parser=getattr(args, "reasoning_parser", None),
        enable_force_include_usage=getattr(args, "enable_force_include_usage", False),
        enable_prompt_tokens_details=getattr(args, "enable_prompt_tokens_details", False),
        enable_server_load_tracking=getattr(args, "enable_server_load_tracking", False),
        root_path=getattr(args, "root_path", None),
        metrics_prefix=getattr(args, "metrics_prefix", "hybridllm"),
        enable_request_id_headers=getattr(args, "enable_request_id_headers", False),
    )


def _abspath(path: str | None) -> str | None:
    return None if path is None else os.path.abspath(path)


def exit_with_launcher() -> None:
    """In a child of `serve`: have the kernel send SIGTERM when the launcher dies, and leave
    at once if it already has."""
    launcher = os.environ.pop(PARENT_PID_ENV, None)
    if launcher is None:
        return
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except OSError:
        return
    if os.getppid() != int(launcher):
        os._exit(1)


def find_packaged_binary(name: str, override_var: str) -> Path:
    """A binary the package ships (maturin installs it beside the interpreter), or the one
    named by the environment variable `override_var`, or the first on PATH."""
    override = os.environ.get(override_var)
    if override:
        path = Path(override)
        if not os.access(path, os.X_OK):
            raise FileNotFoundError(f"{override_var}={override} is not executable")
        return path
    beside = Path(sys.executable).parent / name
    if os.access(beside, os.X_OK):
        return beside
    found = shutil.which(name)
    if found:
        return Path(found)
    raise FileNotFoundError(
        f"{name} binary not found: install the package (maturin builds it) or set {override_var}"
    )


def find_frontend_binary() -> Path:
    return find_packaged_binary("hybridllm-frontend", "HYBRIDLLM_RUST_FRONTEND_PATH")


def listen_url(sock: socket.socket, tls: bool) -> str:
    """Where the bound `sock` serves: http(s)://host:port, or http+unix://path (--uds)."""
    name = sock.getsockname()
    if isinstance(name, str):
        return f"http+unix://{name}"
    host, port = name[:2]
    return f"{'https' if tls else 'http'}://{f'[{host}]' if ':' in host else host}:{port}"


def bind_listen_socket(host: str, port: int, uds: str | None = None) -> socket.socket:
    """Bind (without listening) so the port is ours from now on; the server listens. With
    `uds`, a Unix socket at that path instead (a stale socket file there is replaced).

    IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY on accepted connections only then, and
    without it Nagle holds small SSE chunks back by up to 40 ms (Python frontend)."""
    if uds is not None:
        if os.path.exists(uds) and stat.S_ISSOCK(os.stat(uds).st_mode):
            os.unlink(uds)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(uds)
        sock.set_inheritable(True)
        return sock
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.set_inheritable(True)
    return sock


def spawn(argv: list[str], pass_fds: tuple[int, ...] = (),
          env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """Start a child that exits with this process (see exit_with_launcher), without running
    code between fork and exec."""
    env = dict(env or os.environ)
    env[PARENT_PID_ENV] = str(os.getpid())
    return subprocess.Popen(argv, pass_fds=pass_fds, env=env)


class RustFrontendProcessManager:
    """Owns the frontend child: start it on the inherited socket, watch it, stop it."""

    def __init__(self, sock: socket.socket, engine_address: str | list[str],
                 serve_options: ServeOptions, threads: int | None = None,
                 routing: str = "least-load", keep_alive: bool = False) -> None:
        self.sock = sock
        self.keep_alive = keep_alive  # a dead worker leaves the rotation; /health stays 200
        # Several: data parallelism, the frontend routes among the workers (--routing).
        self.engine_address = (engine_address if isinstance(engine_address, str)
                               else ",".join(engine_address))
        self.routing = routing
        self.serve_options = serve_options
        self.threads = threads
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        fd = self.sock.fileno()
        # Keys go through the environment (readable by this user only), never the command
        # line (/proc/PID/cmdline is world-readable).
        options = {**asdict(self.serve_options), "api_keys": []}
        argv = [
            str(find_frontend_binary()),
            "--listen-fd", str(fd),
            "--engine-address", self.engine_address,
            "--args-json", json.dumps(options),
            "--routing", self.routing,
        ]
        if self.threads:
            argv += ["--worker-threads", str(self.threads)]
        if self.keep_alive:
            argv.append("--keep-alive")
        env = {k: v for k, v in os.environ.items() if k != "HYBRIDLLM_API_KEY"}
        env[KEYS_JSON_ENV] = json.dumps(self.serve_options.api_keys)
        self.proc = spawn(argv, pass_fds=(fd,), env=env)

    def poll(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def stop(self, timeout: float) -> None:
        terminate(self.proc, timeout)


def terminate(proc: subprocess.Popen[bytes] | None, timeout: float) -> None:
    """SIGTERM, then SIGKILL if it has not exited within timeout seconds."""
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    wait_or_kill(proc, timeout)


def wait_or_kill(proc: subprocess.Popen[bytes], timeout: float) -> None:
    """Wait for a child already sent SIGTERM; SIGKILL it after timeout seconds. Never a
    second SIGTERM: a Python child that is past its own shutdown has given back its handler,
    and would die of it with status -15."""
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
