"""RequestTracker: an async iterator of RequestOutputs per request, as one StepConsumer.

For in-process callers that want the engine's own outputs (the engine-alone benchmark): each
request's outputs go to its own asyncio queue, and what one step produced for all of the
tracker's requests reaches the event loop as one callable, like any other consumer's.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from functools import partial

from hybridllm.engine.async_llm_engine import AsyncLLMEngine, StepItem
from hybridllm.outputs import RequestOutput
from hybridllm.sampling_params import SamplingParams


class RequestTracker:
    def __init__(self, engine: AsyncLLMEngine) -> None:
        self.engine = engine
        # Running requests' queues; event loop only (on_step just packs its items).
        self._queues: dict[str, asyncio.Queue[RequestOutput | BaseException]] = {}

    def on_step(self, items: list[StepItem]) -> Callable[[], None]:
        return partial(self._deliver, items)

    def _deliver(self, items: list[StepItem]) -> None:
        queues = self._queues
        for rid, item in items:
            last = isinstance(item, BaseException) or item.finished
            queue = queues.pop(rid, None) if last else queues.get(rid)
            if queue is not None:  # None: the request was aborted here meanwhile
                queue.put_nowait(item)

    async def generate(
        self, prompt: str | list[int], params: SamplingParams, request_id: str
    ) -> AsyncIterator[RequestOutput]:
        """The request's outputs as steps produce them; leaving early aborts it. Raises
        ValueError (a prompt the engine refuses, an id in use) or EngineDeadError."""
        if request_id in self._queues:
            raise ValueError(f"request id {request_id!r} is already in use.")
        queue: asyncio.Queue[RequestOutput | BaseException] = asyncio.Queue()
        self.engine.add_request(request_id, prompt, params, self)
        self._queues[request_id] = queue
        finished = False
        try:
            while True:
                item = await queue.get()
                if isinstance(item, BaseException):
                    finished = True
                    raise item
                finished = item.finished
                yield item
                if finished:
                    return
        finally:
            if not finished:
                self._queues.pop(request_id, None)  # gone if its last item is queued
                self.engine.abort(request_id)
