"""Sampling-parameter validation shared by chat and completions (validation.rs): every
out-of-range value is a 400 naming the field and its limit, before the engine sees it."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from hybridllm.entrypoints.openai.errors import bad
from hybridllm.entrypoints.openai.jsonfmt import rust_display
from hybridllm.entrypoints.openai.serde_json_compat import debug_str
from hybridllm.proto import engine_pb2 as pb
from hybridllm.text.tokenizer import DecodeOpts

MAX_LOGPROBS = 20
U32_MAX = (1 << 32) - 1
I32_MAX = (1 << 31) - 1

# The sampling fields of both endpoints, as serde types (SamplingRequest).
SAMPLING_SCHEMA: list[tuple[str, Any, bool]] = [
    ("n", "i64", False), ("best_of", "i64", False), ("temperature", "f64", False),
    ("top_p", "f64", False), ("top_k", "i64", False), ("min_p", "f64", False),
    ("presence_penalty", "f64", False), ("frequency_penalty", "f64", False),
    ("repetition_penalty", "f64", False), ("seed", "i64", False), ("max_tokens", "i64", False),
    ("max_completion_tokens", "i64", False), ("min_tokens", "i64", False),
    ("stop", "any", False), ("stop_token_ids", ("seq", "u32"), False),
    ("ignore_eos", "bool", False), ("logit_bias", ("map", "f64"), False),
    ("skip_special_tokens", "bool", False), ("spaces_between_special_tokens", "bool", False),
    ("include_stop_str_in_output", "bool", False), ("prompt_logprobs", "i64", False),
]


@dataclass
class GenParams:
    sampling: pb.SamplingParams
    n: int
    max_tokens: int | None
    stop: list[str] = field(default_factory=list)
    include_stop: bool = False
    decode: DecodeOpts = DecodeOpts()
    logprobs: int | None = None  # top-k per generated token (0: only the sampled one)


def _range(req: dict[str, Any], name: str, lo: float, hi: float, lo_open: bool) -> float | None:
    x = req.get(name)
    if x is None:
        return None
    ok = math.isfinite(x) and (x > lo if lo_open else x >= lo) and x <= hi
    if not ok:
        left = "(" if lo_open else "["
        raise bad(f"{name} must be in {left}{rust_display(lo)}, {rust_display(hi)}], "
                  f"got {rust_display(x)}.", name)
    return x


def _stop_list(v: Any) -> list[str]:
    if v is None:
        return []
    if isinstance(v, str):
        return [v]
    if isinstance(v, list) and all(isinstance(x, str) for x in v):
        return list(v)
    raise bad("stop must be a string or a list of strings.", "stop")


def validate(req: dict[str, Any], logprobs: int | None, vocab_size: int) -> GenParams:
    n = req.get("n", 1)
    if not 1 <= n <= 128:
        raise bad(f"n must be in [1, 128], got {n}.", "n")
    if req.get("best_of") is not None and req["best_of"] != n:
        raise bad("best_of is not supported (it must equal n).", "best_of")
    temperature = _range(req, "temperature", 0.0, 2.0, False)
    top_p = _range(req, "top_p", 0.0, 1.0, True)
    min_p = _range(req, "min_p", 0.0, 1.0, False)
    presence = _range(req, "presence_penalty", -2.0, 2.0, False)
    frequency = _range(req, "frequency_penalty", -2.0, 2.0, False)
    rep = req.get("repetition_penalty")
    if rep is not None and not (math.isfinite(rep) and 0.0 < rep <= 2.0):
        raise bad(f"repetition_penalty must be in (0, 2], got {rust_display(rep)}.",
                  "repetition_penalty")
    top_k = req.get("top_k")
    if top_k is not None and not -1 <= top_k <= I32_MAX:
        raise bad(f"top_k must be -1 (disable), or at least 1, got {top_k}.", "top_k")
    mct = req.get("max_completion_tokens")
    m = mct if mct is not None else req.get("max_tokens")
    if m is not None and not 1 <= m <= U32_MAX:
        name = "max_completion_tokens" if mct is not None else "max_tokens"
        raise bad(f"{name} must be at least 1, got {m}.", name)
    min_tokens = req.get("min_tokens", 0)
    if min_tokens < 0 or (m is not None and min_tokens > m):
        raise bad(f"min_tokens must be in [0, max_tokens], got {min_tokens}.", "min_tokens")
    for name, lp in (("logprobs", logprobs), ("prompt_logprobs", req.get("prompt_logprobs"))):
        if lp is not None and not 0 <= lp <= MAX_LOGPROBS:
            raise bad(f"{name} must be in [0, {MAX_LOGPROBS}], got {lp}.", name)
    bias: dict[int, float] = {}
    for k, v in (req.get("logit_bias") or {}).items():
        if not re.fullmatch(r"\+?[0-9]+", k) or int(k) > U32_MAX:
            raise bad(f"logit_bias key {debug_str(k)} is not a token id.", "logit_bias")
        if int(k) >= vocab_size:
            raise bad(f"token_id {int(k)} in logit_bias is out of vocabulary (size {vocab_size}).",
                      "logit_bias")
        if not -100.0 <= v <= 100.0:
            raise bad(f"logit_bias values must be in [-100, 100], got {rust_display(v)}.",
                      "logit_bias")
        bias[int(k)] = v
    stop_ids = req.get("stop_token_ids") or []
    for i in stop_ids:
        if i >= vocab_size:
            raise bad(f"stop token id {i} is out of vocabulary (size {vocab_size}).",
                      "stop_token_ids")
    sp = pb.SamplingParams(n=n)
    for name, value in (("temperature", temperature), ("top_p", top_p), ("top_k", top_k),
                        ("min_p", min_p), ("presence_penalty", presence),
                        ("frequency_penalty", frequency), ("repetition_penalty", rep),
                        ("seed", req.get("seed")), ("min_tokens", req.get("min_tokens")),
                        ("ignore_eos", req.get("ignore_eos")), ("logprobs", logprobs),
                        ("prompt_logprobs", req.get("prompt_logprobs"))):
        if value is not None:
            setattr(sp, name, value)
    sp.stop_token_ids.extend(stop_ids)
    for tid, b in bias.items():
        sp.logit_bias[tid] = b
    return GenParams(
        sampling=sp,
        n=n,
        max_tokens=m,
        stop=_stop_list(req.get("stop")),
        include_stop=bool(req.get("include_stop_str_in_output", False)),
        decode=DecodeOpts(
            skip_special_tokens=req.get("skip_special_tokens", True),
            spaces_between_special_tokens=req.get("spaces_between_special_tokens", True),
        ),
        logprobs=logprobs,
    )


def fit_max_tokens(prompt_len: int, max_tokens: int | None, max_model_len: int) -> int:
    """Checks prompt + completion against the context window; returns max_tokens to send."""
    limit = max_model_len
    if max_tokens is not None and prompt_len + max_tokens > limit:
        raise bad(
            f"This model's maximum context length is {limit} tokens. However, you requested "
            f"{prompt_len + max_tokens} tokens ({prompt_len} in the messages, {max_tokens} in "
            "the completion). Please reduce the length of the messages or completion."
        )
    if max_tokens is not None:
        return max_tokens
    if prompt_len >= limit:
        raise bad(
            f"This model's maximum context length is {limit} tokens. However, you requested "
            f"{prompt_len} tokens in the messages, Please reduce the length of the messages."
        )
    return limit - prompt_len
