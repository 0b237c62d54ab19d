"""Server-sent events out over HTTP (sse.rs): the core's frames as they come, an error chunk
if generation fails mid-stream, then `data: [DONE]\n\n`."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from hybridllm import _api
from hybridllm.entrypoints.openai.errors import body

logger = logging.getLogger("hybridllm.frontend")


class SSEResponse(StreamingResponse):
    """A client that goes away cancels the chunk generator (and so the engine call) at once,
    not at the next write: starlette watches for the disconnect."""

    def __init__(self, frames: AsyncIterator[bytes], done: bool = True) -> None:
        """done: end with `[DONE]`, errors as an error chunk (chat, completions); the
        Responses API ends with its own event and turns errors into events itself."""
        super().__init__(_with_done(frames) if done else frames, media_type="text/event-stream",
                         headers={"cache-control": "no-cache", "x-accel-buffering": "no"})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self.body_iterator.aclose()  # type: ignore[attr-defined]


async def _with_done(frames: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    try:
        async for f in frames:
            yield f
    except _api.ApiError as e:
        logger.warning("stream failed: %s", e.args[1])
        yield b"data: " + body(e) + b"\n\n"
    finally:
        await frames.aclose()  # type: ignore[attr-defined]
    yield b"data: [DONE]\n\n"
