"""RustFrontendProcessManager: runs the Rust HTTP frontend on a socket bound by Python.

Binding in Python first reserves the port before the model loads; the child inherits the
bound socket (pass_fds) and calls listen() itself. Children ask for a parent-death signal
themselves (HYBRIDLLM_PARENT_PID), so no orphan outlives a killed `serve`: the launcher has
gRPC threads by the time it starts the frontend, and running code in a forked child of a
threaded process (a preexec_fn) is what once aborted the frontend before it could exec.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

_PR_SET_PDEATHSIG = 1
PARENT_PID_ENV = "HYBRIDLLM_PARENT_PID"


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


def bind_listen_socket(host: str, port: int) -> socket.socket:
    """Bind (without listening) so the port is ours from now on; the server listens.

    IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY on accepted connections only then, and
    without it Nagle holds small SSE chunks back by up to 40 ms (Python frontend)."""
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

    def __init__(self, sock: socket.socket, engine_address: str,
                 serve_options: dict[str, Any], threads: int | None = None) -> None:
        self.sock = sock
        self.engine_address = engine_address
        self.serve_options = serve_options
        self.threads = threads
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        fd = self.sock.fileno()
        argv = [
            str(find_frontend_binary()),
            "--listen-fd", str(fd),
            "--engine-address", self.engine_address,
            "--args-json", json.dumps(self.serve_options),
        ]
        if self.threads:
            argv += ["--worker-threads", str(self.threads)]
        self.proc = spawn(argv, pass_fds=(fd,))

    def poll(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def stop(self, timeout: float) -> None:
        terminate(self.proc, timeout)


def terminate(proc: subprocess.Popen[bytes] | None, timeout: float) -> None:
    """SIGTERM, then SIGKILL if it has not exited within timeout seconds."""
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
