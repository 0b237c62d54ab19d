"""Serving glue of vLLM's `use_beam_search` extension (the twin of the Rust frontend's
beam_search.rs): `n` is the beam width; bad combinations are refused naming the field."""

from __future__ import annotations

import math
from decimal import Decimal

from hybridllm.proto import engine_pb2 as pb


class BeamSearchRequestError(ValueError):
    """A 400 for the field `param` (the serving layer turns it into its error body)."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param


def beam_params(
    use_beam_search: bool | None, n: int | None, temperature: float | None,
    length_penalty: float | None, ignore_eos: bool | None,
    include_stop_str_in_output: bool | None, stream: bool, logprobs: int | None,
    max_beam_width: int, max_num_seqs: int,
) -> pb.BeamSearchParams | None:
    """The request's beam parameters (max_tokens set later), or None without beam search.
    Checked in the Rust frontend's order, after the common sampling checks. max_num_seqs is
    the engine's (ModelInfo; 0 from a worker that does not say)."""
    if not use_beam_search:
        return None
    if stream:
        raise BeamSearchRequestError(
            "use_beam_search does not support streaming: set stream to false.", "stream")
    n = 1 if n is None else n
    if n > max_beam_width:
        raise BeamSearchRequestError(
            f"n (the beam width) must be at most {max_beam_width} (the server's "
            f"--max-beam-width), got {n}.", "n")
    if 0 < max_num_seqs < n:  # the engine would refuse it: a group runs n sequences at once
        raise BeamSearchRequestError(
            f"n (the beam width) must be at most {max_num_seqs} (the engine's "
            f"--max-num-seqs: a beam search runs n sequences at once), got {n}.", "n")
    if temperature is not None and temperature > 0.0:
        raise BeamSearchRequestError(
            f"temperature must be 0 with use_beam_search, got {_num(temperature)}.",
            "temperature")
    if logprobs is not None:
        raise BeamSearchRequestError(
            "logprobs are not supported with use_beam_search.", "logprobs")
    penalty = 1.0 if length_penalty is None else length_penalty
    if not math.isfinite(penalty):
        raise BeamSearchRequestError(
            f"length_penalty must be a finite number, got {_num(penalty)}.", "length_penalty")
    return pb.BeamSearchParams(
        beam_width=n, ignore_eos=bool(ignore_eos), length_penalty=penalty,
        include_stop_str_in_output=bool(include_stop_str_in_output),
    )


def _num(x: float) -> str:
    """A number as the Rust frontend writes it: 0.7, 1 (no `1.0`)."""
    return f"{Decimal(repr(x)).normalize():f}" if math.isfinite(x) else repr(x)
