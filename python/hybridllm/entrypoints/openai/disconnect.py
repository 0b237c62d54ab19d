"""Work that ends when its client hangs up: starlette only notices a disconnect when a
response is written, so a long non-streaming call would otherwise run (and hold the engine)
to its end for nobody."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable
from typing import TypeVar

from starlette.requests import Request

T = TypeVar("T")


class ClientDisconnected(Exception):
    """The client hung up before the answer was ready; the work was cancelled."""


async def _hang_up(request: Request) -> None:
    # The body has been read, so the next message is the disconnect.
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def unless_disconnected(request: Request, work: Awaitable[T]) -> T:
    """`work`'s result; cancelled (raising ClientDisconnected) if the client leaves first."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.create_task(_hang_up(request))
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
        if not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
    if task.cancelled():
        raise ClientDisconnected
    return task.result()
