"""Body reading with the size limit (413), serde-like parsing (400) and the SSE response."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from hybridllm.entrypoints.openai.errors import ApiError, bad, too_large
from hybridllm.entrypoints.openai.jsonfmt import dumps
from hybridllm.entrypoints.openai.serde_json_compat import TypeErr, parse, path_str
from hybridllm.entrypoints.openai.state import AppState

logger = logging.getLogger("hybridllm.frontend")
DONE = b"data: [DONE]\n\n"


def get_state(request: Request) -> AppState:
    return request.app.state.hybridllm


async def read_json(request: Request, schema: list[tuple[str, Any, bool]],
                    struct_name: str) -> dict[str, Any]:
    limit = get_state(request).options.max_request_body_bytes
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise too_large(limit)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise too_large(limit)
        chunks.append(chunk)
    try:
        return parse(b"".join(chunks), schema, struct_name)
    except ValueError as e:
        raise bad(str(e)) from None
    except TypeErr as e:
        path = path_str(e.path)
        if path == ".":
            raise bad(f"Invalid request: {e.msg}") from None
        raise bad(f"Invalid request: {path}: {e.msg}", path) from None


def frame(v: Any) -> bytes:
    return f"data: {dumps(v)}\n\n".encode()


class SSEResponse(Response):
    """`data: <json>\\n\\n` per chunk, an error chunk if generation fails mid-stream, then
    `data: [DONE]\\n\\n`. A client that goes away cancels the generator (and so the engine
    call) at once, not at the next write."""

    def __init__(self, chunks: AsyncIterator[Any]) -> None:
        super().__init__(status_code=200)
        self.chunks = chunks

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": [
            (b"content-type", b"text/event-stream; charset=utf-8"),
            (b"cache-control", b"no-cache"), (b"x-accel-buffering", b"no")]})
        writer = asyncio.ensure_future(self._write(send))
        watcher = asyncio.ensure_future(self._watch(receive))
        try:
            await asyncio.wait([writer, watcher], return_when=asyncio.FIRST_COMPLETED)
        finally:
            for t in (writer, watcher):
                t.cancel()
            for t in (writer, watcher):
                with contextlib.suppress(BaseException):
                    await t

    async def _write(self, send: Send) -> None:
        try:
            try:
                async for c in self.chunks:
                    await send({"type": "http.response.body", "body": frame(c),
                                "more_body": True})
            except ApiError as e:
                logger.warning("stream failed: %s", e.message)
                await send({"type": "http.response.body", "body": frame(e.body()),
                            "more_body": True})
            await send({"type": "http.response.body", "body": DONE, "more_body": False})
        finally:
            await self.chunks.aclose()  # type: ignore[attr-defined]

    async def _watch(self, receive: Receive) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass


