"""N-gram (prompt lookup) drafts, as vLLM's `method: "ngram"` proposes them.

A sequence's last n tokens, for n from prompt_lookup_max down to prompt_lookup_min, are
looked up in its earlier tokens (prompt and output); the up to k tokens that followed the
most recent occurrence of the longest matching suffix are the draft. Text that repeats its
context (copying, editing, code) is where this wins; elsewhere nothing matches and the step
is an ordinary decode.
"""

from __future__ import annotations

from collections.abc import Sequence as Seq

import numpy as np


class NgramProposer:
    def __init__(self, num_speculative_tokens: int, prompt_lookup_min: int,
                 prompt_lookup_max: int) -> None:
        self.k = num_speculative_tokens
        self.min_n = prompt_lookup_min
        self.max_n = prompt_lookup_max

    def propose(self, token_ids: Seq[int] | np.ndarray, k: int | None = None) -> list[int]:
        """Up to k (default num_speculative_tokens) draft tokens to follow token_ids; [] when
        no suffix of at least prompt_lookup_min tokens occurred before."""
        k = self.k if k is None else k
        t = np.asarray(token_ids, dtype=np.int64)
        last = len(t) - 1
        if k < 1 or last < self.min_n:
            return []
        # Candidate ends: earlier positions holding the last token (one vector compare, so
        # no match costs next to nothing), then each candidate's match length grown backwards
        # while it keeps matching, up to prompt_lookup_max.
        ends = np.flatnonzero(t[:last] == t[last])
        if not ends.size:
            return []
        length = np.ones(ends.size, dtype=np.int64)
        for i in range(1, self.max_n):
            back = ends - i
            grow = (back >= 0) & (length == i)
            if not grow.any():
                break
            grow[grow] = t[back[grow]] == t[last - i]
            length += grow
        n = int(length.max())
        if n < self.min_n:
            return []
        end = int(ends[length >= n][-1])  # the most recent occurrence of the longest match
        return t[end + 1 : end + 1 + k].tolist()
