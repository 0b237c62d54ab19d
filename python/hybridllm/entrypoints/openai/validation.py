"""Sampling-parameter validation shared by chat and completions (validation.rs): every
out-of-range value is a 400 naming the field and its limit, before the engine sees it. The
ranges and messages are the HTTP API's, the Rust frontend's, in its order of checks."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from decimal import Decimal

from hybridllm.entrypoints.generate.beam_search.online import BeamSearchRequestError, beam_params
from hybridllm.entrypoints.openai.errors import bad
from hybridllm.entrypoints.openai.protocol import SamplingRequest
from hybridllm.proto import engine_pb2 as pb

MAX_LOGPROBS = 20
DEFAULT_COMPLETION_MAX_TOKENS = 16  # /v1/completions without max_tokens (OpenAI, vLLM)
U32_MAX = (1 << 32) - 1
I32_MAX = (1 << 31) - 1


@dataclass
class GenParams:
    sampling: pb.SamplingParams
    n: int
    max_tokens: int | None
    stop: list[str] = field(default_factory=list)
    include_stop: bool = False
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    logprobs: int | None = None  # top-k per generated token (0: only the sampled one)
    beam: pb.BeamSearchParams | None = None  # use_beam_search: `sampling` goes unused


def _num(x: float) -> str:
    """A number in a message as the Rust frontend writes it: 3, 2.5, 0.0000001 (no `3.0`)."""
    return f"{Decimal(repr(x)).normalize():f}"


def _range(name: str, x: float | None, lo: float, hi: float, lo_open: bool = False) -> None:
    if x is not None and not ((lo < x if lo_open else lo <= x) and x <= hi):  # NaN fails too
        raise bad(f"{name} must be in {'(' if lo_open else '['}{_num(lo)}, {_num(hi)}], "
                  f"got {_num(x)}.", name)


def validate(req: SamplingRequest, logprobs: int | None, vocab_size: int) -> GenParams:
    n = 1 if req.n is None else req.n
    if not 1 <= n <= 128:
        raise bad(f"n must be in [1, 128], got {n}.", "n")
    if req.best_of is not None and req.best_of != n:
        raise bad("best_of is not supported (it must equal n).", "best_of")
    _range("temperature", req.temperature, 0, 2)
    _range("top_p", req.top_p, 0, 1, lo_open=True)
    _range("min_p", req.min_p, 0, 1)
    _range("presence_penalty", req.presence_penalty, -2, 2)
    _range("frequency_penalty", req.frequency_penalty, -2, 2)
    _range("repetition_penalty", req.repetition_penalty, 0, 2, lo_open=True)
    if req.top_k is not None and not -1 <= req.top_k <= I32_MAX:
        raise bad(f"top_k must be -1 (disable), or at least 1, got {req.top_k}.", "top_k")
    name = "max_tokens" if req.max_completion_tokens is None else "max_completion_tokens"
    max_tokens = getattr(req, name)
    if max_tokens is not None and not 1 <= max_tokens <= U32_MAX:
        raise bad(f"{name} must be at least 1, got {max_tokens}.", name)
    min_tokens = req.min_tokens or 0
    # Without max_tokens the bound is the wire type's (uint32).
    if not 0 <= min_tokens <= (U32_MAX if max_tokens is None else max_tokens):
        raise bad(f"min_tokens must be in [0, max_tokens], got {min_tokens}.", "min_tokens")
    for name, lp in (("logprobs", logprobs), ("prompt_logprobs", req.prompt_logprobs)):
        if lp is not None and not 0 <= lp <= MAX_LOGPROBS:
            raise bad(f"{name} must be in [0, {MAX_LOGPROBS}], got {lp}.", name)
    bias: dict[int, float] = {}
    for k, v in (req.logit_bias or {}).items():
        if not re.fullmatch(r"\+?[0-9]+", k) or int(k) > U32_MAX:  # what u32 parses
            key = json.dumps(k, ensure_ascii=False)
            raise bad(f"logit_bias key {key} is not a token id.", "logit_bias")
        if int(k) >= vocab_size:
            raise bad(f"token_id {int(k)} in logit_bias is out of vocabulary (size {vocab_size}).",
                      "logit_bias")
        if not -100 <= v <= 100:
            raise bad(f"logit_bias values must be in [-100, 100], got {_num(v)}.", "logit_bias")
        bias[int(k)] = v
    for i in req.stop_token_ids or []:
        if i >= vocab_size:
            raise bad(f"stop token id {i} is out of vocabulary (size {vocab_size}).",
                      "stop_token_ids")
    sampling = pb.SamplingParams(  # None leaves a field unset: the engine's default
        n=n, temperature=req.temperature, top_p=req.top_p, top_k=req.top_k, min_p=req.min_p,
        presence_penalty=req.presence_penalty, frequency_penalty=req.frequency_penalty,
        repetition_penalty=req.repetition_penalty, seed=req.seed, min_tokens=req.min_tokens,
        stop_token_ids=req.stop_token_ids or [], ignore_eos=req.ignore_eos, logprobs=logprobs,
        prompt_logprobs=req.prompt_logprobs, logit_bias=bias,
    )
    stop = [] if req.stop is None else [req.stop] if isinstance(req.stop, str) else req.stop
    if not isinstance(stop, list) or not all(isinstance(x, str) for x in stop):
        raise bad("stop must be a string or a list of strings.", "stop")
    return GenParams(sampling, n, max_tokens, stop, bool(req.include_stop_str_in_output),
                     req.skip_special_tokens is not False,
                     req.spaces_between_special_tokens is not False, logprobs)


def check_max_tokens_limit(req: SamplingRequest, limit: int | None) -> None:
    """The operator's --max-tokens-limit: a request asking for more is refused, naming the
    field and the limit (requests that ask for nothing are clamped by fit_max_tokens)."""
    name = "max_tokens" if req.max_completion_tokens is None else "max_completion_tokens"
    asked = getattr(req, name)
    if limit is not None and asked is not None and asked > limit:
        raise bad(f"{name} must be at most {limit} (the server's --max-tokens-limit), "
                  f"got {asked}.", name)


def unset_max_tokens(default: int | None, limit: int | None) -> int | None:
    """The most tokens a request that sets no max_tokens may generate besides the context:
    the endpoint's default (16 on /v1/completions) and the operator's limit, the smaller."""
    caps = [c for c in (default, limit) if c is not None]
    return min(caps) if caps else None


def fit_max_tokens(prompt_len: int, max_tokens: int | None, limit: int,
                   unset_cap: int | None = None) -> int:
    """Checks prompt + completion against the context window; returns max_tokens to send
    (unset: what is left of the context, at most unset_cap)."""
    asked = f"This model's maximum context length is {limit} tokens. However, you requested"
    if max_tokens is None and prompt_len >= limit:
        raise bad(f"{asked} {prompt_len} tokens in the messages, Please reduce the length of the "
                  "messages.")
    if max_tokens is not None and prompt_len + max_tokens > limit:
        raise bad(f"{asked} {prompt_len + max_tokens} tokens ({prompt_len} in the messages, "
                  f"{max_tokens} in the completion). Please reduce the length of the messages or "
                  "completion.")
    if max_tokens is None:
        left = limit - prompt_len
        return left if unset_cap is None else min(unset_cap, left)
    return max_tokens


def check_beam_search(req: SamplingRequest, stream: bool, logprobs: int | None,
                      max_beam_width: int, max_num_seqs: int) -> pb.BeamSearchParams | None:
    """vLLM's use_beam_search (generate/beam_search/online.py), its refusals as 400s."""
    try:
        return beam_params(
            req.use_beam_search, req.n, req.temperature, req.length_penalty, req.ignore_eos,
            req.include_stop_str_in_output, stream, logprobs, max_beam_width,
            max_num_seqs,
        )
    except BeamSearchRequestError as e:
        raise bad(str(e), e.param) from None
