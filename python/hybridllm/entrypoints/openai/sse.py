"""Server-sent events as OpenAI clients parse them (sse.rs): `data: <json>\n\n` per chunk, an
error chunk if generation fails mid-stream, then `data: [DONE]\n\n`."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import orjson
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from hybridllm.entrypoints.openai.errors import ApiError

logger = logging.getLogger("hybridllm.frontend")
DONE = b"data: [DONE]\n\n"


def frame(v: Any) -> bytes:
    return b"data: " + orjson.dumps(v) + b"\n\n"


@dataclass
class ChunkHead:
    """What every streamed chunk of one response repeats."""

    id: str
    object: str
    created: int
    model: str
    include_usage: bool  # then every chunk carries `usage`: null but on the last

    def chunk(self, choices: list[Any], usage: Any = None) -> dict[str, Any]:
        c = {"id": self.id, "object": self.object, "created": self.created,
             "model": self.model, "choices": choices}
        if self.include_usage:
            c["usage"] = usage
        return c


class SSEResponse(Response):
    """A client that goes away cancels the chunk generator (and so the engine call) at once,
    not at the next write."""

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
