"""Clients that stop reading (mock engine): in both frontends a stream whose reader stops is
aborted in the engine once its bounded buffer is full (the request's KV blocks are freed,
the server keeps serving); in the Rust frontend a response whose writes make no progress for
--send-timeout seconds has its connection closed by the server (nginx's send_timeout).

Each client connects with a 4 KiB receive buffer and never reads; the responses are made
large (n = 8, 20 logprobs per token) so that the socket buffers fill in a few seconds. The
stalled body is sized from the kernel's largest send buffer (net.ipv4.tcp_wmem), which
machines set differently (4 MiB by default, 16 MiB and more on tuned hosts)."""

from __future__ import annotations

import json
import math
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.launch import Server, start, stop
from tests.reliability.conftest import API_KEY, KINDS, MOCK

AUTH = {"Authorization": f"Bearer {API_KEY}"}
SEND_TIMEOUT_S = 2.0
STREAM_BUFFER = 1024  # engine_mux.rs: engine responses a request may have waiting unread
N, MAX_TOKENS = 8, 6000
BYTES_PER_TOKEN = 280  # a non-streamed choice's body per token with 20 logprobs (~287 seen)
TCP_ESTABLISHED = 1


def _stalled_size() -> tuple[int, int]:
    """(n, max_tokens) of a body 1.5 times the most the server's send buffer can hold (its
    payload is less than that: the limit counts each buffer's overhead too)."""
    wmem = int(Path("/proc/sys/net/ipv4/tcp_wmem").read_text().split()[2])
    tokens = math.ceil(1.5 * wmem / BYTES_PER_TOKEN)
    n = min(128, max(4 * N, math.ceil(tokens / 1500)))
    return n, max(1500, math.ceil(tokens / n))


def _server_side_state(sock: socket.socket) -> int:
    """The TCP state of the server's end of `sock`'s connection (/proc/net/tcp): it leaves
    ESTABLISHED when the server closes it, while its unsent bytes are still queued."""
    client_port = sock.getsockname()[1]
    server_port = sock.getpeername()[1]
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, remote, state = line.split()[1:4]
        if (int(local.split(":")[1], 16) == server_port
                and int(remote.split(":")[1], 16) == client_port):
            return int(state, 16)
    return 0  # gone altogether


def _server(kind: str, tmp: Path, send_timeout: float) -> Server:
    return start(kind, tmp, *MOCK, "--max-model-len", "8192", "--api-key", API_KEY,
                 "--send-timeout", str(send_timeout))


@pytest.fixture(scope="module", params=KINDS)
def no_send_timeout(request: pytest.FixtureRequest, model_path: Path,
                    tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = _server(request.param, tmp_path_factory.mktemp("stalled"), 0)
    yield srv
    assert stop(srv) == 0


@pytest.fixture(scope="module")
def send_timeout(model_path: Path, tmp_path_factory: pytest.TempPathFactory
                 ) -> Iterator[Server]:
    srv = _server("rust", tmp_path_factory.mktemp("send"), SEND_TIMEOUT_S)
    yield srv
    assert stop(srv) == 0


def _gauges(srv: Server) -> dict[str, float]:
    # A long timeout: the frontend may be busy writing a large body out.
    text = httpx.get(srv.url + "/metrics", headers=AUTH, timeout=60).text
    values: dict[str, float] = {}
    for line in text.splitlines():
        for name in ("num_requests_running", "kv_cache_usage_perc", "generation_tokens_total"):
            if line.startswith(f"hybridllm:{name}"):
                values[name] = values.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
    return values


def _send_without_reading(srv: Server, stream: bool, max_tokens: int, n: int = N
                          ) -> socket.socket:
    model = httpx.get(srv.url + "/v1/models", headers=AUTH).json()["data"][0]["id"]
    body = json.dumps({"model": model, "prompt": "Hi", "max_tokens": max_tokens, "n": n,
                       "logprobs": 20, "ignore_eos": True, "stream": stream}).encode()
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", int(srv.url.rsplit(":", 1)[1])))
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                 b"\r\nAuthorization: Bearer " + API_KEY.encode() +
                 b"\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    return sock


def _wait_idle(srv: Server, limit_s: float) -> tuple[float, dict[str, float]]:
    """Seconds until the engine runs nothing (after it started), and the gauges then."""
    t0 = time.monotonic()
    started = False
    while time.monotonic() - t0 < limit_s:
        g = _gauges(srv)
        started = started or g["num_requests_running"] > 0
        if started and g["num_requests_running"] == 0:
            return time.monotonic() - t0, g
        time.sleep(0.1)
    raise AssertionError(f"still running after {limit_s} s: {_gauges(srv)}")


def _read_all(sock: socket.socket) -> bytes:
    sock.settimeout(10)
    data = b""
    while chunk := sock.recv(1 << 16):
        data += chunk
    return data


def test_a_stream_nobody_reads_is_aborted_at_its_buffer(no_send_timeout: Server) -> None:
    srv = no_send_timeout
    before = _gauges(srv)["generation_tokens_total"]
    sock = _send_without_reading(srv, stream=True, max_tokens=MAX_TOKENS)
    took, g = _wait_idle(srv, 120)
    generated = g["generation_tokens_total"] - before
    print(f"\n{srv.kind}: a stream nobody reads: aborted after {took:.2f} s, {generated:.0f} of "
          f"{N * MAX_TOKENS} tokens generated")
    assert generated < N * MAX_TOKENS  # aborted, not run to the end
    assert g["kv_cache_usage_perc"] == 0.0
    assert (f"aborted: its client read none of its last {STREAM_BUFFER} responses"
            in srv.output())
    # The server keeps serving.
    model = httpx.get(srv.url + "/v1/models", headers=AUTH).json()["data"][0]["id"]
    r = httpx.post(srv.url + "/v1/completions", headers=AUTH, timeout=30, json={
        "model": model, "prompt": "Hi", "max_tokens": 4, "ignore_eos": True})
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 4
    sock.close()


def test_a_stalled_response_is_closed_after_the_send_timeout(send_timeout: Server) -> None:
    srv = send_timeout
    # Not streamed: the engine runs to the end, then the body (several times what the socket
    # buffers hold) stalls.
    n, max_tokens = _stalled_size()
    sock = _send_without_reading(srv, stream=False, max_tokens=max_tokens, n=n)
    _wait_idle(srv, 120)
    t0 = time.monotonic()
    while _server_side_state(sock) == TCP_ESTABLISHED:
        assert time.monotonic() - t0 < 120, "the stalled connection was never closed"
        time.sleep(0.1)
    print(f"\nn={n} max_tokens={max_tokens}: closed {time.monotonic() - t0:.1f} s after the "
          f"engine finished")
    data = _read_all(sock)  # what was in the socket buffers, then the server's close
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length")))
    print(f"a response nobody reads: closed after {len(body)} of {length} body bytes")
    assert head.startswith(b"HTTP/1.1 200")
    assert 0 < len(body) < length
    # Nothing left behind, and the server keeps serving.
    assert _gauges(srv)["num_requests_running"] == 0
    r = httpx.get(srv.url + "/health", timeout=5)
    assert r.status_code == 200
