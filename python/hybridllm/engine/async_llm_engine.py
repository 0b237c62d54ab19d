"""AsyncLLMEngine: LLMEngine.step() in a background loop, outputs streamed per request.

Steps run on one worker thread (torch releases the GIL), so the event loop keeps serving
while the model computes. Adds and aborts are queued and applied between steps, so the
scheduler is only ever touched by one thread at a time.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor

from hybridllm.config import EngineArgs
from hybridllm.engine.llm_engine import LLMEngine
from hybridllm.outputs import RequestOutput
from hybridllm.sampling_params import SamplingParams

# Test hook: make the engine loop fail at this step, to exercise the dead-engine path.
_FAIL_AT_STEP = int(os.environ.get("HYBRIDLLM_TEST_FAIL_AT_STEP", "0"))


class EngineDeadError(RuntimeError):
    """The engine loop stopped with an exception; no request can be served any more."""


class AsyncLLMEngine:
    def __init__(self, engine: LLMEngine) -> None:
        self.engine = engine
        self._queues: dict[str, asyncio.Queue[RequestOutput | BaseException]] = {}
        self._pending_adds: list[tuple[str, list[int] | str, SamplingParams]] = []
        self._pending_aborts: list[str] = []
        self._wake = asyncio.Event()
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="engine-step")
        self._task: asyncio.Task[None] | None = None
        self.error: BaseException | None = None
        self.num_steps = 0
        self.last_step_time = time.monotonic()
        self.dead = asyncio.Event()

    @classmethod
    def from_engine_args(cls, args: EngineArgs, detokenize: bool = False) -> AsyncLLMEngine:
        return cls(LLMEngine.from_engine_args(args, detokenize=detokenize))

    @property
    def is_running(self) -> bool:
        return self._task is not None and not self._task.done() and self.error is None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="engine-loop")

    async def generate(
        self, prompt: str | list[int], params: SamplingParams, request_id: str
    ) -> AsyncIterator[RequestOutput]:
        """Stream the request's outputs as tokens arrive; leaving early aborts the request."""
        if self.error is not None:
            raise EngineDeadError(f"engine loop has died: {self.error!r}")
        if request_id in self._queues:
            raise ValueError(f"request id {request_id!r} is already in use.")
        if isinstance(prompt, list):
            self.engine.validate_prompt(prompt)  # fail fast, in the caller's context
        self.start()
        queue: asyncio.Queue[RequestOutput | BaseException] = asyncio.Queue()
        self._queues[request_id] = queue
        self._pending_adds.append((request_id, prompt, params))
        self._wake.set()
        finished = False
        try:
            while True:
                item = await queue.get()
                if isinstance(item, BaseException):
                    raise item
                finished = item.finished
                yield item
                if finished:
                    return
        finally:
            self._queues.pop(request_id, None)
            if not finished:
                self.abort(request_id)

    def abort(self, request_id: str) -> None:
        """Abort at the next step boundary; its KV blocks are freed then."""
        self._pending_aborts.append(request_id)
        self._wake.set()

    def _apply_pending(self) -> None:
        adds, self._pending_adds = self._pending_adds, []
        for request_id, prompt, params in adds:
            try:
                self.engine.add_request(request_id, prompt, params)
            except ValueError as e:
                queue = self._queues.get(request_id)
                if queue is not None:
                    queue.put_nowait(e)
        aborts, self._pending_aborts = self._pending_aborts, []
        if aborts:
            self.engine.abort_request(aborts)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while True:
                self._apply_pending()
                if not self.engine.has_unfinished_requests():
                    self._wake.clear()
                    if not (self._pending_adds or self._pending_aborts):
                        await self._wake.wait()
                    continue
                outputs = await loop.run_in_executor(self._executor, self._step)
                for out in outputs:
                    queue = self._queues.get(out.request_id)
                    if queue is not None:
                        queue.put_nowait(out)
        except asyncio.CancelledError:
            raise
        except BaseException as e:  # noqa: BLE001 - any failure kills the engine
            self.error = e
            dead = EngineDeadError(f"engine loop has died: {e!r}")
            for queue in self._queues.values():
                queue.put_nowait(dead)
            self.dead.set()

    def _step(self) -> list[RequestOutput]:
        self.num_steps += 1
        if _FAIL_AT_STEP and self.num_steps >= _FAIL_AT_STEP:
            raise RuntimeError(f"injected fault at step {self.num_steps}")
        outputs = self.engine.step()
        self.last_step_time = time.monotonic()
        return outputs

    async def shutdown(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass
        self._executor.shutdown(wait=True, cancel_futures=True)
