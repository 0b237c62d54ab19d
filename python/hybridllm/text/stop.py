"""Stop strings over streamed text, as rust-frontend/src/text/stop.rs: the earliest match wins
(the longest on a tie), and text that could be the start of a match is held back."""

from __future__ import annotations


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
