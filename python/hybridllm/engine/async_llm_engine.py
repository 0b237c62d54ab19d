"""AsyncLLMEngine: LLMEngine.step() back to back on an engine thread, each step's outputs
handed to the StepConsumer of each of its requests, on the engine thread.

The engine thread owns the scheduler: adds and aborts reach it through a queue and are applied
between steps, in the order they were made. Steps run one after another without waiting for
the event loop (torch releases the GIL while it computes), and what each step's consumers
leave for the event loop is handed to it in one call, so serving traffic and stepping overlap.

A consumer (the worker's GenerateStream call; RequestTracker for an async iterator per
request) turns a step's outputs into its own message right there on the engine thread and
leaves the event loop only a small callable: the loop then holds the GIL for microseconds per
step, instead of keeping the engine thread waiting for it when its forward pass ends.

A step's outputs are handed on while the next step's forward pass is in flight (before it,
where the forward pass runs on this thread's CPU), and all the event loop is to do with them
goes out in one wake-up: the loop does its part while the engine thread waits on the model
(GIL released), and building them costs the GPU no idle time.

`from_engine_args` builds the engine on the engine thread too, so that one thread runs every
torch op of the process. OpenMP (libgomp) keeps a pool of threads per thread that enters a
parallel region: an engine loaded on the main thread and stepped on another made two pools,
more OpenMP threads than cores on a 2-core machine, and libgomp then stops spinning between
parallel regions (each of a decode step's ~150 regions waited on a futex): 37.9 ms per decode
token instead of 21.4 with the bundled model (docs/benchmarks.md, the serving race).
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import Protocol

from hybridllm.config import EngineArgs
from hybridllm.engine.llm_engine import LLMEngine
from hybridllm.engine.pooling_engine import PoolingEngine
from hybridllm.outputs import PoolingRequestOutput, RequestOutput
from hybridllm.pooling_params import PoolingParams
from hybridllm.sampling_params import BeamSearchParams, SamplingParams
from hybridllm.sequence import Request

# Test hook: make the engine loop fail at this step, to exercise the dead-engine path.
_FAIL_AT_STEP = int(os.environ.get("HYBRIDLLM_TEST_FAIL_AT_STEP", "0"))

# One request's output of a step, or the exception that ended it.
StepItem = tuple[str, "RequestOutput | PoolingRequestOutput | BaseException"]


class StepConsumer(Protocol):
    def on_step(self, items: list[StepItem]) -> Callable[[], None] | None:
        """Its requests' outputs of one step, on the engine thread (after the engine died: on
        the event loop, each with an EngineDeadError); returns what the event loop is to run
        with the result, if anything. Must not raise."""


# ("add", request_id, prompt, params, consumer) or ("abort", request_id, None, None, None)
_Params = SamplingParams | PoolingParams
# (kind, request id, prompt, params, consumer, priority); an abort has only the id.
_Op = tuple[str, str, "str | list[int] | None", "_Params | None", "StepConsumer | None", int]


class EngineDeadError(RuntimeError):
    """The engine loop stopped with an exception; no request can be served any more."""


class EngineOverloadedError(RuntimeError):
    """Admission control: the request would make more sequences wait than
    --max-waiting-queue-length allows. Refused at once; running requests are unaffected."""


class AsyncLLMEngine:
    """Drives either engine: LLMEngine (generate; SamplingParams) or PoolingEngine (embed;
    PoolingParams), which share the add/abort/step_requests/make_outputs shape."""

    def __init__(self, engine: LLMEngine | PoolingEngine) -> None:
        self.engine = engine
        self._consumers: dict[str, StepConsumer] = {}  # engine-thread side only
        self._outbox: list[Callable[[], None]] = []  # engine thread -> event loop, batched
        self._unsent: list[Request] = []  # touched by the last step, reported during the next
        self._ops: deque[_Op] = deque()  # event loop -> engine thread
        self._wakeup = threading.Event()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._go = threading.Event()  # start(): an engine thread built by `on_own_thread` runs
        self._loop: asyncio.AbstractEventLoop | None = None
        self.error: BaseException | None = None
        self.num_steps = 0
        self.dead = asyncio.Event()
        # Sequences of adds queued for the engine thread: each counter written by one thread.
        self._seqs_queued = 0  # event loop
        self._seqs_applied = 0  # engine thread
        self.max_waiting = engine.config.args.max_waiting_queue_length

    @classmethod
    def from_engine_args(cls, args: EngineArgs, detokenize: bool = False) -> AsyncLLMEngine:
        """The engine the model's task calls for (models.task), built on its engine thread."""
        config = args.resolve()
        if config.task == "embed":
            return cls.on_own_thread(lambda: PoolingEngine(config))
        return cls.on_own_thread(lambda: LLMEngine(config, detokenize=detokenize))

    @classmethod
    def on_own_thread(cls, build: Callable[[], LLMEngine | PoolingEngine]) -> AsyncLLMEngine:
        """`build()` run on a new engine thread, which then waits for `start()` to step the
        engine: the model loads where it will run (the module docstring says why). Raises
        what `build` raised."""
        built: Future[AsyncLLMEngine] = Future()

        def main() -> None:
            try:
                me = cls(build())
            except BaseException as e:  # noqa: BLE001 - handed to the caller
                built.set_exception(e)
                return
            me._thread = threading.current_thread()
            built.set_result(me)
            me._go.wait()
            if not me._stopping:
                me._run()

        threading.Thread(target=main, name="engine-loop", daemon=True).start()
        return built.result()

    def start(self) -> None:
        if self._loop is not None:
            return
        self._loop = asyncio.get_running_loop()
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="engine-loop", daemon=True)
            self._thread.start()
        else:  # built on its own thread, which waits for this
            self._go.set()

    def add_request(
        self, request_id: str, prompt: str | list[int],
        params: SamplingParams | BeamSearchParams | PoolingParams, consumer: StepConsumer,
        priority: int = 0,
    ) -> None:
        """Queue a request whose outputs go to `consumer` on the engine thread, together with
        the other outputs of the same step that are its; nothing follows a finished output or
        an exception. Raises at once for a prompt the engine can never take (ValueError) or a
        dead engine (EngineDeadError); a refusal the engine makes later (a duplicate id)
        reaches the consumer as a ValueError item."""
        self._check_add(prompt)
        waiting, n = self.num_waiting, _num_seqs(params)
        if self.max_waiting is not None and waiting + n > self.max_waiting:
            raise EngineOverloadedError(
                f"The server is overloaded: {waiting} sequences are waiting to be scheduled "
                f"and the limit (--max-waiting-queue-length) is {self.max_waiting}. "
                "Retry later.")
        self._seqs_queued += n
        self._ops.append(("add", request_id, prompt, params, consumer, priority))
        self._wakeup.set()

    @property
    def num_waiting(self) -> int:
        """Sequences not yet scheduled: queued adds and the scheduler's waiting queue. Read on
        the event loop while the engine thread moves them; an add counts twice for a moment
        (in the scheduler before it is counted as applied), never not at all."""
        return self._seqs_queued - self._seqs_applied + len(self.engine.scheduler.waiting)

    def _check_add(self, prompt: str | list[int]) -> None:
        if self.error is not None:
            raise EngineDeadError(f"engine loop has died: {self.error!r}")
        if isinstance(prompt, list):
            self.engine.validate_prompt(prompt)  # fail fast, in the caller's context
        self.start()

    def abort(self, request_id: str) -> None:
        """Abort at the next step boundary; its KV blocks are freed then, and its consumer gets
        no more outputs (but may still get the step's in flight, handed over before it)."""
        self._ops.append(("abort", request_id, None, None, None, 0))
        self._wakeup.set()

    # -- engine thread -------------------------------------------------------------------

    def _apply_ops(self) -> None:
        ops = self._ops
        while ops:
            kind, request_id, prompt, params, consumer, priority = ops.popleft()
            if kind == "abort":
                self._consumers.pop(request_id, None)
                self.engine.abort_request([request_id])
                continue
            assert prompt is not None and params is not None and consumer is not None
            try:
                self.engine.add_request(request_id, prompt, params,  # type: ignore[arg-type]
                                        priority=priority)
            except ValueError as e:
                if (then := consumer.on_step([(request_id, e)])) is not None:
                    self._outbox.append(then)
                continue
            finally:
                self._seqs_applied += _num_seqs(params)
            self._consumers[request_id] = consumer

    def _run(self) -> None:
        try:
            while not self._stopping:
                self._apply_ops()
                if not self.engine.has_unfinished_requests():
                    self._hand_over()
                    # An op made after the check sets the event, so wait() returns at once.
                    self._wakeup.wait()
                    self._wakeup.clear()
                    continue
                touched = self._step()
                self._hand_over()  # if the step ran no forward pass, the last step's are due
                self._unsent = touched
            self._hand_over()
        except BaseException as e:  # noqa: BLE001 - any failure kills the engine
            try:
                self._hand_over()  # what the steps before the failure produced goes out first
            finally:
                self._call_on_loop(self._die, e)

    def _hand_over(self) -> None:
        """The last step's outputs to their consumers, then everything queued for the event
        loop to it in one wake-up."""
        if self._unsent:
            requests, self._unsent = self._unsent, []
            self._dispatch(self.engine.make_outputs(requests))
        if self._outbox:
            batch, self._outbox = self._outbox, []
            self._call_on_loop(_run_all, batch)

    def _dispatch(self, outputs: list[RequestOutput] | list[PoolingRequestOutput]) -> None:
        """Each consumer's outputs to it, here and now, in one batch per consumer."""
        consumers = self._consumers
        batches: dict[StepConsumer, list[StepItem]] = {}
        for out in outputs:
            rid = out.request_id
            consumer = consumers.pop(rid, None) if out.finished else consumers.get(rid)
            if consumer is None:
                continue  # aborted: its consumer has let it go
            if (batch := batches.get(consumer)) is None:
                batches[consumer] = [(rid, out)]
            else:
                batch.append((rid, out))
        for consumer, batch in batches.items():
            if (then := consumer.on_step(batch)) is not None:
                self._outbox.append(then)

    def _call_on_loop(self, fn: Callable[..., None], *args: object) -> None:
        assert self._loop is not None
        try:
            self._loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:
            pass  # the event loop is closed: nobody is left to tell

    # -- event loop ------------------------------------------------------------------------

    def _die(self, error: BaseException) -> None:
        self.error = error
        dead = EngineDeadError(f"engine loop has died: {error!r}")
        # The engine thread has ended: what it owned is the loop's now.
        batches: dict[StepConsumer, list[StepItem]] = {}
        for rid, consumer in self._consumers.items():
            batches.setdefault(consumer, []).append((rid, dead))
        for _, rid, _, _, consumer, _ in self._ops:
            if consumer is not None:  # an add
                batches.setdefault(consumer, []).append((rid, dead))
        self._consumers.clear()
        self._ops.clear()
        for consumer, batch in batches.items():
            if (then := consumer.on_step(batch)) is not None:
                then()
        self.dead.set()

    def _step(self) -> list[Request]:
        self.num_steps += 1
        if _FAIL_AT_STEP and self.num_steps >= _FAIL_AT_STEP:
            raise RuntimeError(f"injected fault at step {self.num_steps}")
        return self.engine.step_requests(while_running=self._hand_over)

    async def shutdown(self) -> None:
        """Stop after the step in flight; requests still running get no more outputs."""
        self._stopping = True
        self._wakeup.set()
        self._go.set()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join)
        if isinstance(self.engine, LLMEngine):
            self.engine.shutdown()


def _num_seqs(params: SamplingParams | BeamSearchParams | PoolingParams) -> int:
    """Sequences a request puts in the waiting queue: n samples, or one pooled input or
    beam group (its prompt; the beams fork once it has run)."""
    return params.n if isinstance(params, SamplingParams) else 1


def _run_all(callbacks: list[Callable[[], None]]) -> None:
    for callback in callbacks:
        callback()
