"""Streaming OpenAI-compatible HTTP client for the serving benchmark: an incremental SSE
parser and one request over a shared aiohttp session (keep-alive, no decompression)."""

from __future__ import annotations

import json
import time
from typing import Any

import orjson

from hybridllm.bench.metrics import RequestResult
from hybridllm.bench.rawhttp import RawPool


class SSEParser:
    """Incremental Server-Sent Events parser: feed() bytes as they arrive, get back the
    complete `data:` payloads (multi-line data joined with newlines; comments and other
    fields ignored; LF, CRLF or CR line ends)."""

    def __init__(self) -> None:
        self._buf = b""
        self._data: list[bytes] = []

    def feed(self, chunk: bytes) -> list[bytes]:
        buf = self._buf + chunk
        if b"\r" in buf:
            if buf.endswith(b"\r"):  # a CRLF may be split across chunks: wait for the LF
                self._buf = buf
                return []
            buf = buf.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        lines = buf.split(b"\n")
        self._buf = lines.pop()  # the incomplete tail
        events: list[bytes] = []
        for line in lines:
            if not line:  # blank line: dispatch
                if self._data:
                    events.append(b"\n".join(self._data))
                    self._data = []
            elif line.startswith(b"data:"):
                value = line[5:]
                self._data.append(value[1:] if value.startswith(b" ") else value)
        return events


def make_session(limit: int, api_key: str | None, kind: str = "aiohttp",
                 base_url: str = ""):  # -> aiohttp.ClientSession | RawPool
    if kind == "raw":
        return RawPool(base_url, api_key)
    import aiohttp

    connector = aiohttp.TCPConnector(
        limit=limit, limit_per_host=0, ttl_dns_cache=None, keepalive_timeout=60,
        enable_cleanup_closed=False, force_close=False,
    )
    headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    return aiohttp.ClientSession(
        connector=connector, headers=headers, auto_decompress=False,
        timeout=aiohttp.ClientTimeout(total=None, sock_connect=30, sock_read=600),
        skip_auto_headers=("User-Agent",), read_bufsize=1 << 16,
    )


def build_payload(endpoint: str, model: str, prompt: str, output_len: int, ignore_eos: bool,
                  extra: dict[str, Any] | None = None) -> bytes:
    body: dict[str, Any] = {
        "model": model, "max_tokens": output_len, "stream": True,
        "stream_options": {"include_usage": True}, "temperature": 0.0,
    }
    if endpoint.endswith("/responses"):  # the Responses API's names; usage comes anyway
        body = {"model": model, "input": prompt, "max_output_tokens": output_len,
                "stream": True, "temperature": 0.0}
    elif endpoint.endswith("chat/completions"):
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    if ignore_eos:
        body["ignore_eos"] = True
    body |= extra or {}
    return json.dumps(body).encode()


_DELTA = "response.output_text.delta"
_DONE = ("response.completed", "response.incomplete")


def _text_of(choice: dict) -> str:
    delta = choice.get("delta")
    if delta is not None:
        return delta.get("content") or delta.get("reasoning_content") or ""
    return choice.get("text") or ""


class _EventStream:
    """What one streamed response says, fed its body bytes as they arrive."""

    def __init__(self, res: RequestResult, start: float) -> None:
        self.res = res
        self.start = start
        self.last = 0.0
        self.chunks = 0
        self.head = b""  # the body's first bytes, for an error status's message
        self._parser = SSEParser()

    def feed(self, data: bytes) -> None:
        now = time.perf_counter()
        if len(self.head) < 200:
            self.head += data[: 200 - len(self.head)]
        res = self.res
        if res.error:
            return
        for event in self._parser.feed(data):
            if event == b"[DONE]":
                continue
            msg = orjson.loads(event)
            kind = msg.get("type")  # the Responses API's named events
            if "error" in msg and "choices" not in msg or kind == "error":
                res.error = f"stream error: {str(msg.get('error') or msg)[:200]}"
                return
            choices = msg.get("choices")
            if choices and _text_of(choices[0]) or kind == _DELTA and msg.get("delta"):
                self.chunks += 1
                if self.last == 0.0:
                    res.ttft = now - self.start
                else:
                    res.itl.append(now - self.last)
                self.last = now
            usage = msg.get("usage")
            if usage:
                res.prompt_tokens = usage.get("prompt_tokens", 0)
                res.output_tokens = usage.get("completion_tokens", 0)
            elif kind in _DONE:
                usage = msg["response"]["usage"]
                res.prompt_tokens, res.output_tokens = usage["input_tokens"], usage[
                    "output_tokens"]


async def send_request(session, url: str, payload: bytes) -> RequestResult:
    """POST one streaming request; TTFT is the first chunk carrying generated text (a
    role-only first chunk does not count), ITL the gaps between text-bearing chunks, token
    counts from the final usage chunk (text-bearing chunks when the server sends no usage)."""
    res = RequestResult()
    start = time.perf_counter()
    stream = _EventStream(res, start)
    try:
        if isinstance(session, RawPool):
            status = await session.post(url, payload, stream.feed)
        else:
            async with session.post(url, data=payload) as resp:
                status = resp.status
                async for data in resp.content.iter_any():
                    stream.feed(data)
                    if res.error:
                        break
        if status != 200:
            res.error = f"HTTP {status}: {stream.head.decode(errors='replace')}"
            return res
        if res.error:
            return res
        res.latency = time.perf_counter() - start
        if not res.output_tokens:
            res.output_tokens = stream.chunks
        if stream.last == 0.0:
            res.error = "no generated text in the stream"
        else:
            res.success = True
    except Exception as e:  # noqa: BLE001 - any transport failure is a failed request
        res.error = f"{type(e).__name__}: {e}"
    return res
