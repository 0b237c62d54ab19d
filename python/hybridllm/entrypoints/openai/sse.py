"""Server-sent events as OpenAI clients parse them (sse.rs): `data: <json>\n\n` per chunk, an
error chunk if generation fails mid-stream, then `data: [DONE]\n\n`."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import orjson
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from hybridllm.entrypoints.openai.errors import ApiError

logger = logging.getLogger("hybridllm.frontend")


def frame(v: Any) -> bytes:
    return b"data: " + orjson.dumps(v) + b"\n\n"


def named_frame(event: str, v: Any) -> bytes:
    """A named event (the Responses API's): `event: <name>\ndata: <json>\n\n`."""
    return b"event: " + event.encode() + b"\ndata: " + orjson.dumps(v) + b"\n\n"


class SSEResponse(StreamingResponse):
    """A client that goes away cancels the chunk generator (and so the engine call) at once,
    not at the next write: starlette watches for the disconnect."""

    def __init__(self, chunks: AsyncIterator[Any], framed: bool = False) -> None:
        """framed: `chunks` are whole frames already, sent as they come with no [DONE] (the
        Responses API ends with its own event and turns errors into events itself)."""
        super().__init__(chunks if framed else _frames(chunks), media_type="text/event-stream",
                         headers={"cache-control": "no-cache", "x-accel-buffering": "no"})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self.body_iterator.aclose()  # type: ignore[attr-defined]


async def _frames(chunks: AsyncIterator[Any]) -> AsyncIterator[bytes]:
    try:
        async for c in chunks:
            yield c if isinstance(c, bytes) else frame(c)  # the core's chunks come framed
    except ApiError as e:
        logger.warning("stream failed: %s", e.message)
        yield frame(e.body())
    finally:
        await chunks.aclose()  # type: ignore[attr-defined]
    yield b"data: [DONE]\n\n"
