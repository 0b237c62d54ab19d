"""Stop strings over streamed text: find a match, and hold back a possible match's start."""

from __future__ import annotations


def find_stop(text: str, new_chars: int, stops: list[str]) -> tuple[int, str] | None:
    """Earliest stop string that ends within the last new_chars characters of text."""
    best: tuple[int, str] | None = None
    for stop in stops:
        start = max(0, len(text) - new_chars - len(stop) + 1)
        idx = text.find(stop, start)
        if idx != -1 and (best is None or idx < best[0]):
            best = (idx, stop)
    return best


def held_back(text: str, stops: list[str]) -> int:
    """Length of the longest suffix of text that is a proper prefix of some stop string."""
    longest = 0
    for stop in stops:
        for n in range(min(len(stop) - 1, len(text)), longest, -1):
            if text.endswith(stop[:n]):
                longest = n
                break
    return longest


class StopStringChecker:
    """Accumulates a sequence's text; says what may be released and whether it stopped."""

    def __init__(self, stops: list[str], include_stop_str_in_output: bool) -> None:
        self.stops = stops
        self.include = include_stop_str_in_output
        self.text = ""
        self.released = 0
        self.stopped_by: str | None = None

    def add(self, delta: str) -> str:
        """Feed new text; return the part that is safe to emit now."""
        self.text += delta
        if self.stops:
            hit = find_stop(self.text, len(delta), self.stops)
            if hit is not None:
                idx, stop = hit
                self.text = self.text[: idx + (len(stop) if self.include else 0)]
                self.stopped_by = stop
                return self._release(len(self.text))
            return self._release(len(self.text) - held_back(self.text, self.stops))
        return self._release(len(self.text))

    def flush(self) -> str:
        """At the end of the sequence nothing is held back any more."""
        return self._release(len(self.text))

    def _release(self, upto: int) -> str:
        out = self.text[self.released : upto] if upto > self.released else ""
        self.released = max(self.released, upto)
        return out
