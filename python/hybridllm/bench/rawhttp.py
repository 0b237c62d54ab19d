"""A minimal HTTP/1.1 keep-alive client on raw asyncio streams, for the benchmark's POSTs of
streamed responses: one write per request, one read per arrival of bytes, chunked transfer
decoding done incrementally in pure Python. It does less per request than aiohttp, so the
load generator takes less of a small machine's CPU (`bench serve --http-client raw`)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
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


class RawPool:
    """Keep-alive connections to one host:port (at most one per request in flight)."""

    def __init__(self, base_url: str, api_key: str | None = None) -> None:
        u = urlsplit(base_url)
        if u.scheme != "http":
            raise SystemExit("bench: --http-client raw speaks plain http only")
        self.host, self.port = u.hostname or "127.0.0.1", u.port or 80
        self._idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
        auth = f"Authorization: Bearer {api_key}\r\n" if api_key else ""
        self._head = (f"Host: {self.host}:{self.port}\r\nContent-Type: application/json\r\n"
                      f"Accept: text/event-stream\r\n{auth}").encode()

    async def __aenter__(self) -> RawPool:
        return self

    async def __aexit__(self, *exc: object) -> None:
        for _, w in self._idle:
            w.close()
        self._idle.clear()

    @asynccontextmanager
    async def post_stream(self, url: str, payload: bytes) -> AsyncIterator[
            tuple[int, AsyncIterator[bytes]]]:
        path = urlsplit(url).path
        reader = writer = None
        while self._idle and reader is None:
            reader, writer = self._idle.pop()
            if reader.at_eof() or writer.is_closing():  # closed by the server while idle
                writer.close()
                reader = writer = None
        if reader is None or writer is None:
            reader, writer = await asyncio.open_connection(self.host, self.port, limit=1 << 20)
        reusable = False
        try:
            writer.write(b"POST " + path.encode() + b" HTTP/1.1\r\n" + self._head
                         + b"Content-Length: " + str(len(payload)).encode() + b"\r\n\r\n"
                         + payload)
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.split(b"\r\n")
            status = int(lines[0].split(b" ", 2)[1])
            headers = {}
            for line in lines[1:]:
                k, _, v = line.partition(b":")
                headers[k.strip().lower()] = v.strip().lower()
            chunked = headers.get(b"transfer-encoding") == b"chunked"
            length = int(headers.get(b"content-length", b"-1"))
            state = {"done": False}

            async def body() -> AsyncIterator[bytes]:
                if chunked:
                    dec = ChunkedDecoder()
                    while not dec.done:
                        data = await reader.read(1 << 16)
                        if not data:
                            raise ConnectionError("connection closed mid-response")
                        out = dec.feed(data)
                        if out:
                            yield out
                elif length >= 0:
                    got = 0
                    while got < length:
                        data = await reader.read(min(1 << 16, length - got))
                        if not data:
                            raise ConnectionError("connection closed mid-response")
                        got += len(data)
                        yield data
                else:
                    while data := await reader.read(1 << 16):
                        yield data
                state["done"] = chunked or length >= 0

            yield status, body()
            reusable = state["done"] and headers.get(b"connection") != b"close"
        finally:
            if reusable:
                self._idle.append((reader, writer))
            else:
                writer.close()
