"""AsyncLLMEngine: LLMEngine.step() back to back on an engine thread, outputs delivered to
each request's sink on the event loop.

The engine thread owns the scheduler: adds and aborts reach it through a queue and are applied
between steps, in the order they were made. Steps run one after another without waiting for
the event loop (torch releases the GIL while it computes), and each step's outputs are handed
to the event loop in one call, so serving traffic and stepping overlap.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections import deque
from collections.abc import AsyncIterator, Callable

from hybridllm.config import EngineArgs
from hybridllm.engine.llm_engine import LLMEngine
from hybridllm.outputs import RequestOutput
from hybridllm.sampling_params import SamplingParams

# Test hook: make the engine loop fail at this step, to exercise the dead-engine path.
_FAIL_AT_STEP = int(os.environ.get("HYBRIDLLM_TEST_FAIL_AT_STEP", "0"))

OutputSink = Callable[["RequestOutput | BaseException"], None]
# ("add", request_id, prompt, params) or ("abort", request_id, None, None)
_Op = tuple[str, str, "str | list[int] | None", "SamplingParams | None"]


class EngineDeadError(RuntimeError):
    """The engine loop stopped with an exception; no request can be served any more."""


class AsyncLLMEngine:
    def __init__(self, engine: LLMEngine) -> None:
        self.engine = engine
        self._sinks: dict[str, OutputSink] = {}  # event-loop side only
        self._ops: deque[_Op] = deque()  # event loop -> engine thread
        self._wakeup = threading.Event()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.error: BaseException | None = None
        self.num_steps = 0
        self.dead = asyncio.Event()

    @classmethod
    def from_engine_args(cls, args: EngineArgs, detokenize: bool = False) -> AsyncLLMEngine:
        return cls(LLMEngine.from_engine_args(args, detokenize=detokenize))

    def start(self) -> None:
        if self._thread is None:
            self._loop = asyncio.get_running_loop()
            self._thread = threading.Thread(target=self._run, name="engine-loop", daemon=True)
            self._thread.start()

    def add_request(
        self, request_id: str, prompt: str | list[int], params: SamplingParams, sink: OutputSink
    ) -> None:
        """Queue a request; `sink` then gets, on the event loop, each of its outputs as a step
        produces them, or one exception (EngineDeadError, ValueError) that ends it. Nothing
        follows a finished output or an exception. Raises at once for a prompt the engine can
        never take or a duplicate id."""
        if self.error is not None:
            raise EngineDeadError(f"engine loop has died: {self.error!r}")
        if request_id in self._sinks:
            raise ValueError(f"request id {request_id!r} is already in use.")
        if isinstance(prompt, list):
            self.engine.validate_prompt(prompt)  # fail fast, in the caller's context
        self.start()
        self._sinks[request_id] = sink
        self._ops.append(("add", request_id, prompt, params))
        self._wakeup.set()

    async def generate(
        self, prompt: str | list[int], params: SamplingParams, request_id: str
    ) -> AsyncIterator[RequestOutput]:
        """Stream the request's outputs as tokens arrive; leaving early aborts the request."""
        queue: asyncio.Queue[RequestOutput | BaseException] = asyncio.Queue()
        self.add_request(request_id, prompt, params, queue.put_nowait)
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
                self.abort(request_id)

    def abort(self, request_id: str) -> None:
        """Abort at the next step boundary; its KV blocks are freed then. Its sink gets no more
        outputs."""
        self._sinks.pop(request_id, None)
        self._ops.append(("abort", request_id, None, None))
        self._wakeup.set()

    # -- engine thread -------------------------------------------------------------------

    def _apply_ops(self) -> None:
        ops = self._ops
        while ops:
            op = ops.popleft()
            if op[0] == "abort":
                self.engine.abort_request([op[1]])
                continue
            _, request_id, prompt, params = op
            assert prompt is not None and params is not None
            try:
                self.engine.add_request(request_id, prompt, params)
            except ValueError as e:
                self._call_on_loop(self._reject, request_id, e)

    def _run(self) -> None:
        try:
            while not self._stopping:
                self._apply_ops()
                if not self.engine.has_unfinished_requests():
                    # An op made after the check sets the event, so wait() returns at once.
                    self._wakeup.wait()
                    self._wakeup.clear()
                    continue
                outputs = self._step()
                if outputs:
                    self._call_on_loop(self._deliver, outputs)
        except BaseException as e:  # noqa: BLE001 - any failure kills the engine
            self._call_on_loop(self._die, e)

    def _call_on_loop(self, fn: Callable[..., None], *args: object) -> None:
        assert self._loop is not None
        try:
            self._loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:
            pass  # the event loop is closed: nobody is left to tell

    # -- event loop ------------------------------------------------------------------------

    def _deliver(self, outputs: list[RequestOutput]) -> None:
        sinks = self._sinks
        for out in outputs:
            rid = out.request_id
            sink = sinks.pop(rid, None) if out.finished else sinks.get(rid)
            if sink is not None:
                sink(out)

    def _reject(self, request_id: str, error: ValueError) -> None:
        sink = self._sinks.pop(request_id, None)
        if sink is not None:
            sink(error)

    def _die(self, error: BaseException) -> None:
        self.error = error
        dead = EngineDeadError(f"engine loop has died: {error!r}")
        sinks, self._sinks = self._sinks, {}
        for sink in sinks.values():
            sink(dead)
        self.dead.set()

    def _step(self) -> list[RequestOutput]:
        self.num_steps += 1
        if _FAIL_AT_STEP and self.num_steps >= _FAIL_AT_STEP:
            raise RuntimeError(f"injected fault at step {self.num_steps}")
        return self.engine.step()

    async def shutdown(self) -> None:
        """Stop after the step in flight; requests still running get no more outputs."""
        self._stopping = True
        self._wakeup.set()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join)
