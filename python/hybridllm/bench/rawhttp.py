"""A minimal HTTP/1.1 keep-alive client on an asyncio Protocol, for the benchmark's POSTs of
streamed responses: one write per request, the response parsed in the read callback (chunked
transfer decoding done incrementally in pure Python) and handed on without waking a task per
arrival of bytes. It does far less per request than aiohttp, so the load generator takes less
of a small machine's CPU (`bench serve --http-client raw`)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import cast
from urllib.parse import urlsplit


class ChunkedDecoder:
    """Incremental `Transfer-Encoding: chunked` decoder: feed() raw bytes, get body bytes;
    `done` once the last (zero-size) chunk and its trailer are read."""

    def __init__(self) -> None:
        self._buf = b""
        self._left = 0  # body bytes still due in the current chunk
        self._crlf = False  # a chunk's trailing CRLF is still due
        self.done = False

    def feed(self, data: bytes) -> bytes:
        buf = self._buf + data if self._buf else data
        out = []
        i = 0
        while not self.done:
            if self._left:
                take = min(self._left, len(buf) - i)
                if take <= 0:
                    break
                out.append(buf[i : i + take])
                i += take
                self._left -= take
                if self._left:
                    break
                self._crlf = True
            if self._crlf:
                if len(buf) - i < 2:
                    break
                i += 2
                self._crlf = False
            j = buf.find(b"\r\n", i)
            if j < 0:
                break
            size = int(buf[i:j].split(b";", 1)[0], 16)
            if size == 0:  # last chunk: its CRLF then the empty trailer's (no trailers sent)
                if len(buf) < j + 4:
                    break  # keep the size line until the final CRLF arrives
                i = j + 4
                self.done = True
                break
            i = j + 2
            self._left = size
        self._buf = buf[i:]
        return b"".join(out)


class _Connection(asyncio.Protocol):
    """One keep-alive connection, one response at a time, parsed inside data_received: body
    bytes go straight to the request's callback, with no task switch per arrival."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.reusable = False
        self._done: asyncio.Future[int] | None = None
        self._on_body: Callable[[bytes], None] = _ignore
        self._head = b""
        self._status = 0
        self._mode = ""  # "" (reading the head), "chunked", "length" or "close"
        self._left = 0
        self._dec = ChunkedDecoder()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._mode == "close":
            self._finish()
        elif self._done is not None and not self._done.done():
            self._done.set_exception(ConnectionError("connection closed mid-response"))

    def request(self, data: bytes, on_body: Callable[[bytes], None]) -> asyncio.Future[int]:
        assert self.transport is not None
        self._done = asyncio.get_running_loop().create_future()
        self._on_body, self._mode, self._head, self.reusable = on_body, "", b"", False
        self.transport.write(data)
        return self._done

    def data_received(self, data: bytes) -> None:
        if self._done is None or self._done.done():
            return  # nothing asked for this
        try:
            if not self._mode:
                data = self._read_head(data)
                if not data:
                    return
            if self._mode == "chunked":
                body = self._dec.feed(data)
                if body:
                    self._on_body(body)
                if self._dec.done:
                    self._finish()
            elif self._mode == "length":
                body = data[: self._left]
                self._left -= len(body)
                self._on_body(body)
                if not self._left:
                    self._finish()
            else:
                self._on_body(data)
        except Exception as e:  # noqa: BLE001 - the request fails, not the event loop
            self._done.set_exception(e)
            assert self.transport is not None
            self.transport.close()

    def _read_head(self, data: bytes) -> bytes:
        """Consume the status line and headers; what follows them is returned."""
        self._head += data
        end = self._head.find(b"\r\n\r\n")
        if end < 0:
            return b""
        lines = self._head[:end].split(b"\r\n")
        rest, self._head = self._head[end + 4 :], b""
        self._status = int(lines[0].split(b" ", 2)[1])
        headers = {}
        for line in lines[1:]:
            k, _, v = line.partition(b":")
            headers[k.strip().lower()] = v.strip().lower()
        keep_alive = headers.get(b"connection") != b"close"
        if headers.get(b"transfer-encoding") == b"chunked":
            self._mode, self._dec = "chunked", ChunkedDecoder()
        elif b"content-length" in headers:
            self._mode, self._left = "length", int(headers[b"content-length"])
            if not self._left:
                self._finish()
        else:
            self._mode, keep_alive = "close", False
        self.reusable = keep_alive
        return rest

    def _finish(self) -> None:
        self._mode = "done"
        if self._done is not None and not self._done.done():
            self._done.set_result(self._status)


def _ignore(data: bytes) -> None:
    pass


class RawPool:
    """Keep-alive connections to one host:port (at most one per request in flight)."""

    def __init__(self, base_url: str, api_key: str | None = None) -> None:
        u = urlsplit(base_url)
        if u.scheme != "http":
            raise SystemExit("bench: --http-client raw speaks plain http only")
        self.host, self.port = u.hostname or "127.0.0.1", u.port or 80
        self._idle: list[_Connection] = []
        auth = f"Authorization: Bearer {api_key}\r\n" if api_key else ""
        self._head = (f"Host: {self.host}:{self.port}\r\nContent-Type: application/json\r\n"
                      f"Accept: text/event-stream\r\n{auth}").encode()

    async def __aenter__(self) -> RawPool:
        return self

    async def __aexit__(self, *exc: object) -> None:
        for conn in self._idle:
            if conn.transport is not None:
                conn.transport.close()
        self._idle.clear()

    async def post(self, url: str, payload: bytes, on_body: Callable[[bytes], None]) -> int:
        """POST payload; each piece of the response body goes to on_body as it arrives (from
        the event loop's read callback: keep it short). Returns the status once it is read."""
        path = urlsplit(url).path
        conn = None
        while self._idle and conn is None:
            conn = self._idle.pop()
            if conn.closed:  # closed by the server while idle
                conn = None
        if conn is None:
            _, conn = await asyncio.get_running_loop().create_connection(
                _Connection, self.host, self.port)
        status = 0
        try:
            status = await conn.request(
                b"POST " + path.encode() + b" HTTP/1.1\r\n" + self._head + b"Content-Length: "
                + str(len(payload)).encode() + b"\r\n\r\n" + payload, on_body)
        finally:
            if status and conn.reusable and not conn.closed:
                self._idle.append(conn)
            elif conn.transport is not None:
                conn.transport.close()
        return status
