"""Each step's token bitmask for the constrained sampling rows, filled on a worker thread
while the forward pass runs: llguidance computes the masks of all rows in parallel with the
GIL released, so on CPU too the fill overlaps the model's torch ops. The sampler waits for it
only when it needs the logits masked (TokenBitmask.apply)."""

from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING

import numpy as np
import torch

from hybridllm.sequence import Sequence
from hybridllm.step_types import TokenBitmask

if TYPE_CHECKING:
    from llguidance import LLExecutor, LLMatcher


class PendingBitmask:
    """A fill in flight; wait() gives the step's TokenBitmask."""

    def __init__(self, masks: GrammarMasks, future: Future[TokenBitmask]) -> None:
        self._masks = masks
        self._future = future

    def wait(self) -> TokenBitmask:
        start = time.perf_counter()
        bitmask = self._future.result()
        self._masks.wait_seconds += time.perf_counter() - start
        return bitmask


class GrammarMasks:
    def __init__(self, vocab_size: int, pin_memory: bool) -> None:
        self.vocab_size = vocab_size
        self.words = (vocab_size + 31) // 32
        self.pin_memory = pin_memory
        self._pool: ThreadPoolExecutor | None = None
        self._executor: LLExecutor | None = None
        # For the bench and metrics: fills done, their time, and the time the sampler waited.
        self.num_fills = 0
        self.fill_seconds = 0.0
        self.wait_seconds = 0.0

    def start(self, seqs: list[Sequence]) -> PendingBitmask | None:
        """Start filling the bitmask of seqs' constrained rows (row i is seqs[i]); None when
        no row is constrained. Called on the engine thread: what the fill reads is taken
        here, so the engine may finish a sequence while it runs."""
        rows: list[int] = []
        work: list[tuple[LLMatcher, int]] = []
        min_tokens: list[tuple[int, frozenset[int]]] = []
        for i, seq in enumerate(seqs):
            matcher = seq.matcher
            if matcher is None:
                continue
            if seq.num_output_tokens < seq.params.min_tokens:
                min_tokens.append((len(rows), seq.stop_ids))
            work.append((matcher, len(rows)))
            rows.append(i)
        if not rows:
            return None
        if self._pool is None:
            from llguidance import LLExecutor

            self._executor = LLExecutor()
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="grammar-masks")
        return PendingBitmask(self, self._pool.submit(self._fill, rows, work, min_tokens))

    def _fill(
        self, rows: list[int], work: list[tuple[LLMatcher, int]],
        min_tokens: list[tuple[int, frozenset[int]]],
    ) -> TokenBitmask:
        # llguidance.numpy, not llguidance.torch: the latter's import pulls in torch.compile
        # (seconds, on the first constrained request).
        from llguidance.numpy import fill_next_token_bitmask_par

        start = time.perf_counter()
        array = np.full((len(rows), self.words), -1, dtype=np.int32)
        fill_next_token_bitmask_par(self._executor, work, array)
        bits = torch.from_numpy(array)
        for row, stop_ids in min_tokens:
            _ban_unless_only(bits[row], stop_ids)
        # Unpacked here, not in the sampler: one bool per token, bit k of a little-endian
        # int32 word being token 32 * word + k, as llguidance lays them out.
        unpacked = np.unpackbits(bits.numpy().view(np.uint8), axis=1, bitorder="little")
        banned = torch.from_numpy(unpacked[:, : self.vocab_size]) == 0
        if self.pin_memory:
            banned = banned.pin_memory()
        self.num_fills += 1
        self.fill_seconds += time.perf_counter() - start
        return TokenBitmask(rows, bits, banned)


def _ban_unless_only(words: torch.Tensor, stop_ids: frozenset[int]) -> None:
    """min_tokens on a constrained row: the stop ids are banned unless the grammar allows
    nothing else (a complete grammar ends the output, as it overrides ignore_eos)."""
    kept = words.clone()
    for token in stop_ids:
        word, bit = divmod(token, 32)
        if word < len(words):
            words[word] &= ~(1 << bit) if bit < 31 else 0x7FFFFFFF
    if not bool(words.any()):
        words.copy_(kept)
