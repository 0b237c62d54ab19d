"""A model runner with no model, for measuring everything around the forward pass.

The scheduler, KV-cache manager, engine loop, gRPC and HTTP layers all run for real; only the
forward pass is replaced by a fixed wait and a deterministic token per sequence (and, where a
request asks for them, made-up logprobs of the same shape as the real sampler's).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

from hybridllm.config import EngineConfig
from hybridllm.executor.kv_cache import num_kv_blocks
from hybridllm.models.pooler import normalize_rows
from hybridllm.outputs import Logprob, LogprobsDict
from hybridllm.step_types import (
    PoolingSchedulerOutput,
    SamplerOutput,
    SchedulerOutput,
    StepResult,
    TokenBitmask,
    WindowPool,
    reaches_end,
)
from hybridllm.structured.masks import GrammarMasks

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
        self.window_pool: WindowPool | None = None
        self.grammar_masks = GrammarMasks(config.model.vocab_size, pin_memory=False)

    def execute(
        self, sched: SchedulerOutput, while_running: Callable[[], None] | None = None
    ) -> StepResult:
        """Like a GPU forward pass: `while_running` runs within the step's time, not after."""
        _take_step_time(self.step_s, while_running)
        seqs = [s for s, n in zip(sched.seqs, sched.num_new_tokens) if reaches_end(s, n)]
        tokens = [_FIRST_TOKEN + s.num_tokens % _NUM_TOKENS for s in seqs]
        if (pending := self.grammar_masks.start(seqs)) is not None:
            _constrain(tokens, pending.wait())
        logprobs = [None if s.params.logprobs is None else _entry(t, s.params.logprobs)
                    for s, t in zip(seqs, tokens)]
        sampled = [None if e is None else _CHOSEN_LOGPROB for e in logprobs]
        result = StepResult(SamplerOutput(tokens, logprobs, sampled), seqs,
                            _prompt_logprobs(sched))
        if sched.has_beams:  # beam rows: made-up continuations, each less likely than the last
            result.beam_candidates = {
                i: ([-0.5 * (j + 1) for j in range(s.beam_topk)],
                    [(t + j) % _NUM_TOKENS + _FIRST_TOKEN for j in range(s.beam_topk)])
                for i, (s, t) in enumerate(zip(seqs, tokens)) if s.beam_topk
            }
        return result


_CHOSEN_LOGPROB = -0.5


def _constrain(tokens: list[int], bitmask: TokenBitmask) -> None:
    """A constrained row keeps its made-up token where the grammar allows it, else takes the
    lowest allowed id (the EOS when the grammar is complete): the mock accepts grammars."""
    for j, row in enumerate(bitmask.rows):
        if not bitmask.allows(j, tokens[row]):
            allowed = bitmask.allowed_ids(j)
            tokens[row] = allowed[0] if allowed else 0  # none: the matcher reports its error


def _entry(chosen: int, k: int) -> LogprobsDict:
    """The chosen token first (rank 1), then the next k - 1 ids, each less likely."""
    entry = {chosen: Logprob(_CHOSEN_LOGPROB, 1)}
    for j in range(1, k):
        other = _FIRST_TOKEN + (chosen - _FIRST_TOKEN + j) % _NUM_TOKENS
        entry[other] = Logprob(_CHOSEN_LOGPROB - j, j + 1)
    return entry


def _prompt_logprobs(sched: SchedulerOutput) -> dict[int, tuple[int, list[LogprobsDict]]]:
    """As the model runner reports them: per sequence that asked, the first position this
    chunk predicts and one entry per prompt token it predicts."""
    out: dict[int, tuple[int, list[LogprobsDict]]] = {}
    for seq, num_new in zip(sched.seqs, sched.num_new_tokens):
        start = seq.num_computed_tokens
        end = min(start + num_new, seq.num_prompt_tokens - 1)
        if seq.params.prompt_logprobs is None or seq.index != 0 or start >= end:
            continue
        k = seq.params.prompt_logprobs
        out[seq.seq_id] = (start + 1, [_entry(t, k) for t in seq.token_ids[start + 1:end + 1]])
    return out


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
