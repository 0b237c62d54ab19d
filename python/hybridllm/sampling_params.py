"""Per-request sampling options, validated on construction."""

from __future__ import annotations

import json as _json
from dataclasses import dataclass, field
from typing import Any

_STRUCTURED_FIELDS = ("json", "regex", "choice", "grammar", "json_object")


@dataclass
class StructuredOutputsParams:
    """A constraint on the output (vLLM's names): exactly one of a JSON schema (dict or its
    text), a regex, a list of choices, a grammar (llguidance's Lark dialect, or its serialized
    grammar as the gRPC contract carries it) or any JSON object. Enforced token by token by
    llguidance in the engine (docs/structured_outputs.md)."""

    json: dict[str, Any] | str | None = None
    regex: str | None = None
    choice: list[str] | None = None
    grammar: str | None = None
    json_object: bool | None = None

    # llguidance's serialized grammar, written by the API core from the fields above.
    _grammar: str = field(default="", init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        from hybridllm import _api  # the API core: the same rules as a served request's

        fields = {f: getattr(self, f) for f in _STRUCTURED_FIELDS if getattr(self, f) is not None}
        try:
            self._grammar = _api.structured_grammar(_json.dumps(fields))
        except TypeError as e:  # not JSON at all (a set, an object): the field's type is wrong
            raise ValueError(f"structured_outputs: {e}") from None

    def llguidance_grammar(self) -> str:
        """The grammar in llguidance's serialized form (what LLMatcher compiles and what the
        gRPC contract carries), as the API core writes it for a served request. Not compiled
        here: the engine compiles it, and refuses what llguidance cannot enforce."""
        return self._grammar


# Top logprobs per token, at most (the API's limit too: validation.rs's MAX_LOGPROBS).
MAX_LOGPROBS = 20


class ParamError(ValueError):
    """A request refused for one of its fields; `param` names it (the worker sends it on as
    RequestError.param, the frontends as the OpenAI error's `param`)."""

    def __init__(self, param: str, message: str) -> None:
        super().__init__(message)
        self.param = param


def _check(ok: bool, param: str, message: str) -> None:
    if not ok:
        raise ParamError(param, message)


@dataclass
class SamplingParams:
    """What and how to sample for one request (vLLM's names and defaults).

    temperature 0 means greedy. `seed` makes a request's samples reproducible whatever else
    shares its batch. `logprobs` is the number of top alternatives returned per generated token
    (0 = the sampled token's only); `prompt_logprobs` likewise per prompt token.
    """

    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    min_p: float = 0.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    seed: int | None = None
    max_tokens: int | None = 16
    min_tokens: int = 0
    stop: list[str] | str | None = None
    stop_token_ids: list[int] = field(default_factory=list)
    ignore_eos: bool = False
    logprobs: int | None = None
    prompt_logprobs: int | None = None
    logit_bias: dict[int, float] | None = None
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    include_stop_str_in_output: bool = False
    structured_outputs: StructuredOutputsParams | None = None
    # vLLM's cache_salt: prefix-cache hits only between requests with the same salt (tenants).
    cache_salt: str | None = None
    # vLLM's allowed_token_ids: every other token's logit is -inf before sampling.
    allowed_token_ids: list[int] | None = None
    # vLLM's bad_words: never generated; the engine tokenizes them (Request.bad_words_ids).
    bad_words: list[str] | None = None

    def __post_init__(self) -> None:
        if self.top_k == 0:
            self.top_k = -1
        if isinstance(self.stop, str):
            self.stop = [self.stop]
        self.stop = list(self.stop or [])
        self.stop_token_ids = list(self.stop_token_ids or [])
        if self.logit_bias:
            self.logit_bias = {int(k): float(v) for k, v in self.logit_bias.items()}
        if self.allowed_token_ids is not None:
            self.allowed_token_ids = [int(t) for t in self.allowed_token_ids]
        self._validate()

    def _validate(self) -> None:
        """The offline engine's own guards. Where the API (the core's validation.rs) checks the
        same rule, the message is the API's; the API is narrower where vLLM's offline
        SamplingParams allows more, and so is this: n has no upper bound, temperature none
        above 0 (the API allows [1, 128] and [0, 2])."""
        _check(isinstance(self.n, int) and self.n >= 1, "n", f"n must be at least 1, got {self.n}.")
        _check(0.0 <= self.temperature, "temperature",
               f"temperature must be non-negative, got {self.temperature}.")
        _check(0.0 < self.top_p <= 1.0, "top_p", f"top_p must be in (0, 1], got {self.top_p}.")
        _check(self.top_k == -1 or self.top_k >= 1, "top_k",
               f"top_k must be -1 (disable), or at least 1, got {self.top_k}.")
        _check(0.0 <= self.min_p <= 1.0, "min_p", f"min_p must be in [0, 1], got {self.min_p}.")
        for name in ("presence_penalty", "frequency_penalty"):
            value = getattr(self, name)
            _check(-2.0 <= value <= 2.0, name, f"{name} must be in [-2, 2], got {value}.")
        _check(0.0 < self.repetition_penalty <= 2.0, "repetition_penalty",
               f"repetition_penalty must be in (0, 2], got {self.repetition_penalty}.")
        _check(self.max_tokens is None or self.max_tokens >= 1, "max_tokens",
               f"max_tokens must be at least 1, got {self.max_tokens}.")
        most = self.min_tokens if self.max_tokens is None else self.max_tokens
        _check(0 <= self.min_tokens <= most, "min_tokens",
               f"min_tokens must be in [0, max_tokens], got {self.min_tokens}.")
        for name in ("logprobs", "prompt_logprobs"):
            value = getattr(self, name)
            _check(value is None or 0 <= value <= MAX_LOGPROBS, name,
                   f"{name} must be in [0, {MAX_LOGPROBS}], got {value}.")
        _check(all(t >= 0 for t in self.stop_token_ids), "stop_token_ids",
               "stop_token_ids must be non-negative token ids.")
        _check(all(s for s in self.stop), "stop", "stop strings must not be empty.")
        _check(all(isinstance(w, str) for w in self.bad_words or []), "bad_words",
               "bad_words must be a list of strings.")
        _check(self.allowed_token_ids is None or len(self.allowed_token_ids) > 0,
               "allowed_token_ids", "allowed_token_ids must name at least one token id.")
        salt_ok = self.cache_salt is None or isinstance(self.cache_salt, str) and self.cache_salt
        _check(bool(salt_ok), "cache_salt", "cache_salt must be a non-empty string.")
        _check(self.structured_outputs is None
               or isinstance(self.structured_outputs, StructuredOutputsParams),
               "structured_outputs", "structured_outputs must be a StructuredOutputsParams.")
        for bias in (self.logit_bias or {}).values():
            _check(-100.0 <= bias <= 100.0, "logit_bias",
                   f"logit_bias values must be in [-100, 100], got {bias}.")

    @property
    def greedy(self) -> bool:
        return self.temperature < 1e-5

    def plain_greedy_except_min_tokens(self) -> bool:
        """Greedy with no logprobs, logit bias or penalties: the sampler's argmax-only path
        takes the row (once min_tokens no longer bans the stop tokens)."""
        return (
            self.greedy
            and self.logprobs is None
            and not self.logit_bias
            and self.allowed_token_ids is None
            and not self.bad_words
            and self.repetition_penalty == 1.0
            and self.frequency_penalty == 0.0
            and self.presence_penalty == 0.0
        )

    @property
    def grammar(self) -> str | None:
        """The output constraint in llguidance's serialized form, None without one."""
        so = self.structured_outputs
        return None if so is None else so.llguidance_grammar()


BEAM_WITH_GRAMMAR = (
    "beam search cannot be combined with structured outputs (structured_outputs): "
    "use sampling (n, temperature) with a constraint, or beam search without one."
)


@dataclass
class BeamSearchParams:
    """One beam-search request (vLLM's names and defaults): `beam_width` live beams, scored
    as transformers scores them (cumulative logprob / generated length ** length_penalty).

    `early_stopping` is transformers': False (stop when no running beam can beat the worst
    finished one at its current length), True (stop once `beam_width` beams finished) or
    "never" (the canonical bound at max length when length_penalty > 0).
    """

    beam_width: int
    max_tokens: int
    ignore_eos: bool = False
    temperature: float = 0.0
    length_penalty: float = 1.0
    include_stop_str_in_output: bool = False
    early_stopping: bool | str = False
    # Refused when set: kept so the refusal names both features (docs/structured_outputs.md).
    structured_outputs: StructuredOutputsParams | None = None

    def __post_init__(self) -> None:
        _check(self.structured_outputs is None, "structured_outputs", BEAM_WITH_GRAMMAR)
        _check(isinstance(self.beam_width, int) and self.beam_width >= 1, "beam_width",
               f"beam_width must be at least 1, got {self.beam_width}.")
        _check(isinstance(self.max_tokens, int) and self.max_tokens >= 1, "max_tokens",
               f"max_tokens must be at least 1, got {self.max_tokens}.")
        # Beam search is deterministic here: scores are the model's own logprobs.
        _check(self.temperature == 0.0, "temperature",
               f"temperature must be 0 for beam search, got {self.temperature}.")
        _check(self.early_stopping in (True, False, "never"), "early_stopping",
               f'early_stopping must be True, False or "never", got {self.early_stopping!r}.')
