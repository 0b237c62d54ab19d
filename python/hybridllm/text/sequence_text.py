"""One sequence's text as its tokens arrive, offline and in the Python frontend alike (as
rust-frontend/src/openai/generate.rs): incremental detokenization, then stop strings."""

from __future__ import annotations

from hybridllm.text.detokenizer import IncrementalDetokenizer
from hybridllm.text.stop import StopChecker
from hybridllm.text.tokenizer import DecodeOpts, Tokenizer


class SequenceText:
    def __init__(self, prompt_ids: list[int], opts: DecodeOpts, stops: list[str],
                 include_stop: bool) -> None:
        self.detok = IncrementalDetokenizer(prompt_ids, opts)
        self.stops = StopChecker(stops, include_stop)

    def push(self, tok: Tokenizer, ids: list[int], last: bool) -> tuple[str, str | None]:
        """The text `ids` add, and the stop string matched in it if any. `last`: the sequence
        ends with them, so what either step held back comes out too (up to a match)."""
        text = self.detok.push(tok, ids)
        if last:
            text += self.detok.flush(tok)
        text, matched = self.stops.push(text)
        if last and matched is None:
            text += self.stops.flush()
        return text, matched
