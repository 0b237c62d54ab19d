"""One Embed call: its inputs queued as pooling requests, the reply once the last is pooled.

The call is its requests' StepConsumer. Each input is a request of its own (`<id>-<i>`), so
the engine packs inputs of different calls into one forward pass; the vectors are copied into
the reply on the engine thread as their steps finish, and the event loop only completes the
future. A cancelled call (client gone) aborts whatever has not run yet.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from hybridllm.engine.async_llm_engine import AsyncLLMEngine, EngineDeadError, StepItem
from hybridllm.outputs import PoolingRequestOutput
from hybridllm.pooling_params import PoolingParams
from hybridllm.proto import engine_pb2 as pb
from hybridllm.server.engine_mux import EngineCallError


class EmbedCall:
    def __init__(self, engine: AsyncLLMEngine, request: pb.EmbedRequest) -> None:
        self.engine = engine
        self.request = request
        n = len(request.inputs)
        self.ids = [f"{request.request_id}-{i}" for i in range(n)]
        self._index = {rid: i for i, rid in enumerate(self.ids)}
        self._reply = pb.EmbedResponse()
        self._vectors: list[list[float] | None] = [None] * n
        self._left = n
        self._done: asyncio.Future[pb.EmbedResponse] = asyncio.get_running_loop().create_future()

    async def run(self) -> pb.EmbedResponse:
        """The embeddings, in input order; raises EngineCallError for a refused input."""
        if not self.ids:
            raise EngineCallError("INVALID_ARGUMENT", "inputs: at least one input is required.")
        normalize = self.request.normalize if self.request.HasField("normalize") else None
        params = PoolingParams(normalize=normalize)
        added: list[str] = []
        try:
            for rid, item in zip(self.ids, self.request.inputs):
                self.engine.add_request(rid, list(item.token_ids), params, self)
                added.append(rid)
            return await self._done
        except ValueError as e:
            raise EngineCallError("INVALID_ARGUMENT", str(e)) from e
        except EngineDeadError as e:
            raise EngineCallError("UNAVAILABLE", str(e)) from e
        finally:
            # Cancelled (which cancels _done too) or refused: free what has not run.
            done = self._done
            if not done.done() or done.cancelled() or done.exception() is not None:
                for rid in added:
                    self.engine.abort(rid)

    def on_step(self, items: list[StepItem]) -> Callable[[], None] | None:
        """Engine thread: keep each finished vector; the reply once all are in."""
        for rid, out in items:
            if isinstance(out, BaseException):
                return self._fail(out)
            assert isinstance(out, PoolingRequestOutput)
            i = self._index[rid]
            if self._vectors[i] is None:
                self._vectors[i] = out.outputs.data.tolist()
                self._left -= 1
        if self._left:
            return None
        reply = self._reply
        for values in self._vectors:
            reply.embeddings.add().values.extend(values)  # type: ignore[arg-type]
        return lambda: self._done.done() or self._done.set_result(reply)

    def _fail(self, error: BaseException) -> Callable[[], None]:
        code = "INVALID_ARGUMENT" if isinstance(error, ValueError) else "UNAVAILABLE"
        failure = EngineCallError(code, str(error))
        return lambda: self._done.done() or self._done.set_exception(failure)
