"""Incremental detokenization, rule for rule as rust-frontend/src/text/detokenizer.rs.

Each push decodes a short window of earlier tokens plus the new ones and emits only what the
window's text gained; while the text ends in U+FFFD (an incomplete UTF-8 sequence across
tokens) nothing is emitted and the window stays put. The window starts on the prompt's last
tokens so that the first output token decodes as it would in context.
"""

from __future__ import annotations

from hybridllm.text.tokenizer import DecodeOpts, Tokenizer

PROMPT_CONTEXT = 5  # prompt tokens seeding the detokenizer window


def _is_char_boundary(b: bytes, i: int) -> bool:
    return i == len(b) or (i < len(b) and (b[i] & 0xC0) != 0x80)


class IncrementalDetokenizer:
    def __init__(self, prompt_ids: list[int], opts: DecodeOpts) -> None:
        ctx = prompt_ids[max(0, len(prompt_ids) - PROMPT_CONTEXT) :]
        self.ids = list(ctx)
        self.prefix_offset = 0
        self.read_offset = len(ctx)
        self.opts = opts

    def _window(self, tok: Tokenizer) -> tuple[bytes, bytes, str]:
        prefix = tok.decode(self.ids[self.prefix_offset : self.read_offset], self.opts)
        full = tok.decode(self.ids[self.prefix_offset :], self.opts)
        return prefix.encode(), full.encode(), full

    def push(self, tok: Tokenizer, new_ids: list[int]) -> str:
        self.ids.extend(new_ids)
        p, f, full = self._window(tok)
        if len(f) > len(p) and not full.endswith("\ufffd") and _is_char_boundary(f, len(p)):
            self.prefix_offset = self.read_offset
            self.read_offset = len(self.ids)
            return f[len(p) :].decode()
        return ""

    def flush(self, tok: Tokenizer) -> str:
        p, f, _ = self._window(tok)
        self.prefix_offset = self.read_offset
        self.read_offset = len(self.ids)
        if len(f) > len(p) and _is_char_boundary(f, len(p)):
            # A character left incomplete at the end is dropped, not sent as U+FFFD.
            return f[len(p) :].decode().rstrip("\ufffd")
        return ""
