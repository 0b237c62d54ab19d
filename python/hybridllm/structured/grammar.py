"""Grammars compiled against the model's tokenizer: one LLTokenizer per engine (built on the
first constrained request, so engines that never see one pay nothing), one LLMatcher per
sequence."""

from __future__ import annotations

import time
from collections import OrderedDict, deque
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from llguidance import LLMatcher, LLTokenizer
    from tokenizers import Tokenizer

# Compiled grammars kept for reuse (a matcher is deep-copied from its compiled form): a batch
# of requests with one schema, or n > 1, compiles it once.
_CACHE_SIZE = 64


class GrammarCompiler:
    def __init__(
        self, tokenizer: Tokenizer, vocab_size: int, eos_token_ids: tuple[int, ...]
    ) -> None:
        self._hf_tokenizer = tokenizer
        self.vocab_size = vocab_size  # the logits' width: the bitmask covers every column
        self.eos_token_ids = eos_token_ids
        self._ll_tokenizer: LLTokenizer | None = None
        self._compiled: OrderedDict[str, LLMatcher] = OrderedDict()
        # Seconds per grammar compiled (not cache hits), the latest ones: the bench reads them.
        self.compile_seconds: deque[float] = deque(maxlen=10_000)

    @property
    def ll_tokenizer(self) -> LLTokenizer:
        if self._ll_tokenizer is None:
            from llguidance import LLTokenizer

            self._ll_tokenizer = LLTokenizer(
                self._hf_tokenizer.to_str(), n_vocab=self.vocab_size,
                eos_token=list(self.eos_token_ids),
            )
        return self._ll_tokenizer

    def matchers(self, grammar: str, n: int) -> list[LLMatcher]:
        """n fresh matchers for `grammar`; ValueError (the request's alone) if it does not
        compile, with llguidance's message (it names the keyword or the position)."""
        compiled = self._compiled.get(grammar)
        if compiled is None:
            from llguidance import LLMatcher

            tokenizer = self.ll_tokenizer
            start = time.perf_counter()
            compiled = LLMatcher(tokenizer, grammar, log_level=0)
            self.compile_seconds.append(time.perf_counter() - start)
            if compiled.is_error():
                error = compiled.get_error().split("\n<state>")[0]  # not the parser's dump
                raise ValueError(f"structured_outputs: the grammar cannot be enforced: {error}")
            self._compiled[grammar] = compiled
            if len(self._compiled) > _CACHE_SIZE:
                self._compiled.popitem(last=False)
        else:
            self._compiled.move_to_end(grammar)
        return [compiled.deep_copy() for _ in range(n)]
