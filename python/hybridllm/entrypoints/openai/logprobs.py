"""Logprob shapes (logprobs.rs): chat's `content: [{token, logprob, bytes, top_logprobs}]`,
the legacy completions arrays, and vLLM's prompt_logprobs."""

from __future__ import annotations

import math
from typing import Any

from hybridllm._api import Tokenizer
from hybridllm.proto import engine_pb2 as pb


def finite(x: float) -> float:
    """JSON has no -inf/NaN; vLLM reports -9999.0 for them."""
    return x if math.isfinite(x) else -9999.0


def _entry(tok: Tokenizer, t: pb.TokenLogprob) -> dict[str, Any]:
    s = tok.token_text(t.token_id)
    return {"token": s, "logprob": finite(t.logprob), "bytes": list(s.encode())}


def chat_content(tok: Tokenizer, lps: list[pb.PositionLogprobs], top_n: int) -> list[Any]:
    return [{**_entry(tok, p.token), "top_logprobs": [_entry(tok, x) for x in list(p.top)[:top_n]]}
            for p in lps if p.HasField("token")]


def completion_logprobs(tok: Tokenizer, lps: list[pb.PositionLogprobs], top_n: int,
                        offset: int = 0) -> tuple[dict[str, Any], int]:
    """The legacy arrays, and the text offset (in bytes, like Rust) after their tokens."""
    out: dict[str, list[Any]] = {"text_offset": [], "token_logprobs": [], "tokens": [],
                                 "top_logprobs": []}
    for p in lps:
        if not p.HasField("token"):
            continue
        t, s = p.token, tok.token_text(p.token.token_id)
        out["text_offset"].append(offset)
        offset += len(s.encode())
        nan = math.isnan(t.logprob)
        out["token_logprobs"].append(None if nan else finite(t.logprob))
        top = {tok.token_text(x.token_id): finite(x.logprob) for x in list(p.top)[:top_n]}
        if top_n > 0:
            top.setdefault(s, finite(t.logprob))  # vLLM always lists the sampled token
        out["top_logprobs"].append(None if nan else top)
        out["tokens"].append(s)
    return out, offset


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
