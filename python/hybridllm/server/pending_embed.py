"""One embedding request on a GenerateStream call: its inputs run as pooling requests of their
own (`<id>#<i>`, so the engine packs inputs of different requests into one forward pass), and
their vectors are gathered here, on the engine thread, into the request's one response."""

from __future__ import annotations

import grpc

from hybridllm.engine.async_llm_engine import EngineOverloadedError
from hybridllm.outputs import PoolingRequestOutput
from hybridllm.pooling_params import PoolingParams
from hybridllm.proto import engine_pb2 as pb
from hybridllm.server.responses import refused, rejected


class PendingEmbed:
    first = False  # never a stream's first tokens (GenerateStreamCall orders those first)

    def __init__(self, req: pb.EmbedRequest) -> None:
        self.request_id = req.request_id
        self.part_ids = [f"{req.request_id}#{i}" for i in range(len(req.inputs))]
        self.inputs = [list(x.token_ids) for x in req.inputs]
        self.params = PoolingParams(normalize=req.normalize if req.HasField("normalize") else None)
        self._vectors: list[list[float] | None] = [None] * len(self.inputs)
        self._left = len(self.inputs)
        self.done = False  # its response is made (engine thread)

    def add(self, index: int, out: PoolingRequestOutput) -> bool:
        """Keeps one input's vector; True once every input has one."""
        if self._vectors[index] is None:
            self._vectors[index] = out.outputs.data.tolist()
            self._left -= 1
        return self._left == 0

    def fill(self, resp: pb.GenerateResponse) -> None:
        resp.request_id = self.request_id
        resp.finished = True
        for values in self._vectors:
            resp.embeddings.add().values.extend(values)  # type: ignore[arg-type]

    def failed(self, error: BaseException) -> pb.GenerateResponse:
        """A refusal (INVALID_ARGUMENT), admission control's (RESOURCE_EXHAUSTED: the frontends
        answer 429) or a dead engine (UNAVAILABLE)."""
        if isinstance(error, ValueError):
            return refused(self.request_id, error)
        code = (grpc.StatusCode.RESOURCE_EXHAUSTED if isinstance(error, EngineOverloadedError)
                else grpc.StatusCode.UNAVAILABLE)
        return rejected(self.request_id, code, str(error))
