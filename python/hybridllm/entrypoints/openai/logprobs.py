"""Logprob shapes (logprobs.rs): chat's `content: [{token, logprob, bytes, top_logprobs}]`,
the legacy completions arrays, and vLLM's prompt_logprobs."""

from __future__ import annotations

import math
from typing import Any

from hybridllm.proto import engine_pb2 as pb
from hybridllm.text.tokenizer import Tokenizer


def finite(x: float) -> float:
    """JSON has no -inf/NaN; vLLM reports -9999.0 for them."""
    return x if math.isfinite(x) else -9999.0


def _entry(tok: Tokenizer, t: pb.TokenLogprob) -> dict[str, Any]:
    s = tok.token_text(t.token_id)
    return {"token": s, "logprob": finite(t.logprob), "bytes": list(s.encode())}


def chat_content(tok: Tokenizer, lps: list[pb.PositionLogprobs], top_n: int) -> list[Any]:
    out = []
    for p in lps:
        if not p.HasField("token"):
            continue
        e = _entry(tok, p.token)
        e["top_logprobs"] = [_entry(tok, x) for x in list(p.top)[:top_n]]
        out.append(e)
    return out


class CompletionLogprobs:
    def __init__(self, offset: int = 0) -> None:
        self.tokens: list[str] = []
        self.token_logprobs: list[Any] = []
        self.top_logprobs: list[Any] = []
        self.text_offset: list[int] = []
        self.offset = offset  # text offset (in bytes, like Rust) of the next token

    def extend(self, tok: Tokenizer, lps: list[pb.PositionLogprobs],
               top_n: int) -> CompletionLogprobs:
        for p in lps:
            if p.HasField("token"):
                self._push(tok, p, top_n)
        return self

    def _push(self, tok: Tokenizer, p: pb.PositionLogprobs, top_n: int) -> None:
        t = p.token
        s = tok.token_text(t.token_id)
        self.text_offset.append(self.offset)
        self.offset += len(s.encode())
        nan = math.isnan(t.logprob)
        self.token_logprobs.append(None if nan else finite(t.logprob))
        top: dict[str, Any] = {}
        for x in list(p.top)[:top_n]:
            top[tok.token_text(x.token_id)] = finite(x.logprob)
        if top_n > 0:
            top.setdefault(s, finite(t.logprob))  # vLLM always lists the sampled token
        self.top_logprobs.append(None if nan else top)
        self.tokens.append(s)

    def to_json(self) -> dict[str, Any]:
        return {"text_offset": self.text_offset, "token_logprobs": self.token_logprobs,
                "tokens": self.tokens, "top_logprobs": self.top_logprobs}


def prompt_logprobs(tok: Tokenizer, lps: Any) -> list[Any] | None:
    """None when not asked for (no positions)."""
    if not lps:
        return None
    out: list[Any] = []
    for i, p in enumerate(lps):
        t = p.token if p.HasField("token") else None
        if t is None or i == 0 or math.isnan(t.logprob):
            out.append(None)
            continue
        m: dict[str, Any] = {}
        for x in [t, *p.top]:
            m.setdefault(str(x.token_id), {"logprob": finite(x.logprob), "rank": x.rank,
                                           "decoded_token": tok.token_text(x.token_id)})
        out.append(m)
    return out
