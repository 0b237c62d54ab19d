"""Tokenizer wrapper, incremental detokenizer and stop-string checker, ported rule for rule
from `rust-frontend/src/text/` (byte offsets included) so both frontends emit the same deltas.

`hybridllm.text` has older variants of the last two (no prompt context, no flush, different
tie-breaks); these are the ones whose output must match the Rust frontend byte for byte.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tokenizers import Tokenizer as HfTokenizer

PROMPT_CONTEXT = 5  # prompt tokens seeding the detokenizer window (text/detokenizer.rs)


@dataclass(frozen=True)
class DecodeOpts:
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True


class Tokenizer:
    def __init__(self, path: str | Path) -> None:
        try:
            self.inner = HfTokenizer.from_file(str(path))
        except Exception as e:  # noqa: BLE001 - the tokenizers error type is not public
            raise RuntimeError(f"cannot load tokenizer {path}: {e}") from e
        self.added = set(self.inner.get_added_tokens_decoder().keys())

    def encode(self, text: str, add_special_tokens: bool) -> list[int]:
        return self.inner.encode(text, add_special_tokens=add_special_tokens).ids

    def vocab_size(self) -> int:
        return self.inner.get_vocab_size(with_added_tokens=True)

    def _plain(self, ids: list[int], skip: bool) -> str:
        return self.inner.decode(ids, skip_special_tokens=skip)

    def decode(self, ids: list[int], o: DecodeOpts = DecodeOpts()) -> str:
        """Kept special tokens are spaced from their neighbours (transformers' slow rule)."""
        if (
            o.skip_special_tokens
            or not o.spaces_between_special_tokens
            or not any(i in self.added for i in ids)
        ):
            return self._plain(ids, o.skip_special_tokens)
        parts: list[str] = []
        run: list[int] = []
        for i in ids:
            if i in self.added:
                if run:
                    parts.append(self._plain(run, False))
                    run = []
                parts.append(self._plain([i], False))
            else:
                run.append(i)
        if run:
            parts.append(self._plain(run, False))
        return " ".join(parts)

    def token_text(self, token_id: int) -> str:
        return self._plain([token_id], False)


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


class StopChecker:
    """Earliest stop-string match wins (longest on a tie); a possible match's start is held."""

    def __init__(self, stops: list[str], include: bool) -> None:
        self.stops = [s for s in stops if s]
        self.include = include
        self.text = ""
        self.emitted = 0

    def push(self, delta: str) -> tuple[str, str | None]:
        """Returns (text safe to emit, matched stop string or None)."""
        if not self.stops:
            return delta, None
        self.text += delta
        pending = self.text[self.emitted :]
        hits = [(p, -len(s), s) for s in self.stops if (p := pending.find(s)) != -1]
        if hits:
            p, _, s = min(hits, key=lambda h: (h[0], h[1]))
            end = p + len(s) if self.include else p
            self.emitted = len(self.text)
            return pending[:end], s
        hold = self._partial_suffix_len(pending)
        out = pending[: len(pending) - hold]
        self.emitted += len(out)
        return out, None

    def _partial_suffix_len(self, pending: str) -> int:
        for i in range(len(pending)):
            suffix = pending[i:]
            if any(len(s) > len(suffix) and s.startswith(suffix) for s in self.stops):
                return len(pending) - i
        return 0

    def flush(self) -> str:
        out = self.text[self.emitted :]
        self.emitted = len(self.text)
        return out
