"""A model runner with no model, for measuring everything around the forward pass.

The scheduler, KV-cache manager, engine loop, gRPC and HTTP layers all run for real; only the
forward pass is replaced by a fixed wait and a deterministic token per sequence.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

from hybridllm.config import EngineConfig
from hybridllm.executor.kv_cache import num_kv_blocks
from hybridllm.models.pooler import normalize_rows
from hybridllm.step_types import PoolingSchedulerOutput, SamplerOutput, SchedulerOutput, StepResult

# Ordinary word-piece ids (no special tokens), cycled through by position.
_FIRST_TOKEN = 1000
_NUM_TOKENS = 256


def _take_step_time(step_s: float, while_running: Callable[[], None] | None) -> None:
    """A forward pass's wall time, `while_running` done within it (as on a GPU)."""
    start = time.perf_counter()
    if while_running is not None:
        while_running()
    left = step_s - (time.perf_counter() - start)
    if left > 0:
        time.sleep(left)


class MockModelRunner:
    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        self.step_s = config.args.mock_step_ms / 1000.0
        self.num_blocks = num_kv_blocks(config)

    def execute(
        self, sched: SchedulerOutput, while_running: Callable[[], None] | None = None
    ) -> StepResult:
        """Like a GPU forward pass: `while_running` runs within the step's time, not after."""
        _take_step_time(self.step_s, while_running)
        seqs = [item.seq for item in sched.scheduled if item.samples]
        tokens = [_FIRST_TOKEN + s.num_tokens % _NUM_TOKENS for s in seqs]
        none: list[None] = [None] * len(seqs)
        result = StepResult(SamplerOutput(tokens, list(none), list(none)), seqs, {})
        if sched.has_beams:  # beam rows: made-up continuations, each less likely than the last
            result.beam_candidates = {
                i: ([-0.5 * (j + 1) for j in range(s.beam_topk)],
                    [(t + j) % _NUM_TOKENS + _FIRST_TOKEN for j in range(s.beam_topk)])
                for i, (s, t) in enumerate(zip(seqs, tokens)) if s.beam_topk
            }
        return result


class MockPoolingRunner:
    """PoolingRunner's contract with no encoder: each input's vector says only its length and
    its first token, so the serving layers around it are what is measured and checked."""

    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        self.step_s = config.args.mock_step_ms / 1000.0

    @property
    def hidden_size(self) -> int:
        return self.config.model.hidden_size

    def execute(
        self, sched: PoolingSchedulerOutput, while_running: Callable[[], None] | None = None
    ) -> torch.Tensor:
        _take_step_time(self.step_s, while_running)
        hidden = self.hidden_size
        out = torch.zeros(len(sched.requests), hidden)
        for row, request in enumerate(sched.requests):
            out[row, 0] = float(request.num_tokens)
            out[row, 1 + request.prompt_token_ids[0] % (hidden - 1)] = 1.0
        return normalize_rows(out, [r.normalize for r in sched.requests])
