"""Pooling steps: whole encoder inputs, first come first served, under the token budget.

No KV cache, so nothing stays running between steps: a step takes waiting requests in order
while their tokens fit max_num_batched_tokens and their count max_num_seqs, and each one is
done when its step ends. An input is never split (max_model_len <= the budget, checked in
EngineArgs.resolve), so the first waiting request always fits.
"""

from __future__ import annotations

from collections import deque

from hybridllm.config import SchedulerConfig
from hybridllm.sequence import PoolingRequest
from hybridllm.step_types import PoolingSchedulerOutput


class PoolingScheduler:
    def __init__(self, config: SchedulerConfig) -> None:
        self.config = config
        self.waiting: deque[PoolingRequest] = deque()

    def add(self, request: PoolingRequest) -> None:
        self.waiting.append(request)

    def remove(self, request: PoolingRequest) -> bool:
        """Drop a request that has not run yet; False if it was not waiting."""
        try:
            self.waiting.remove(request)
        except ValueError:
            return False
        return True

    def has_waiting(self) -> bool:
        return bool(self.waiting)

    def schedule(self) -> PoolingSchedulerOutput:
        out = PoolingSchedulerOutput()
        budget = self.config.max_num_batched_tokens
        max_seqs = self.config.max_num_seqs
        waiting = self.waiting
        while waiting and len(out.requests) < max_seqs:
            n = waiting[0].num_tokens
            if n > budget and out.requests:
                break
            out.requests.append(waiting.popleft())
            budget -= n
        return out
