"""Between protobuf messages and the engine's own types."""

from __future__ import annotations

import math

from hybridllm.outputs import LogprobsDict
from hybridllm.proto import engine_pb2 as pb
from hybridllm.sampling_params import (
    BEAM_WITH_GRAMMAR,
    BeamSearchParams,
    SamplingParams,
    StructuredOutputsParams,
)

_OPTIONAL_FIELDS = (
    "n", "temperature", "top_p", "top_k", "min_p", "presence_penalty", "frequency_penalty",
    "repetition_penalty", "seed", "max_tokens", "min_tokens", "ignore_eos", "logprobs",
    "prompt_logprobs",
)

FINISH_REASONS = {
    None: pb.FINISH_REASON_UNSPECIFIED,
    "length": pb.FINISH_REASON_LENGTH,
    "stop": pb.FINISH_REASON_STOP,
    "abort": pb.FINISH_REASON_ABORT,
    "error": pb.FINISH_REASON_ERROR,
}


def sampling_params_from_proto(msg: pb.SamplingParams) -> SamplingParams:
    """Only fields the client set are passed on: unset means the engine default."""
    kwargs: dict[str, object] = {f: getattr(msg, f) for f in _OPTIONAL_FIELDS if msg.HasField(f)}
    if "max_tokens" not in kwargs:
        kwargs["max_tokens"] = None  # whatever fits in max_model_len
    kwargs["stop_token_ids"] = list(msg.stop_token_ids)
    if msg.logit_bias:
        kwargs["logit_bias"] = dict(msg.logit_bias)
    if msg.grammar:
        kwargs["structured_outputs"] = StructuredOutputsParams(grammar=msg.grammar)
    if msg.cache_salt:
        kwargs["cache_salt"] = msg.cache_salt
    if msg.allowed_token_ids:
        kwargs["allowed_token_ids"] = list(msg.allowed_token_ids)
    if msg.bad_words:
        kwargs["bad_words"] = list(msg.bad_words)
    return SamplingParams(**kwargs)  # type: ignore[arg-type]


def request_params_from_proto(req: pb.GenerateRequest) -> SamplingParams | BeamSearchParams:
    """A beam search when `beam_search` is set, else the request's sampling parameters."""
    if not req.HasField("beam_search"):
        return sampling_params_from_proto(req.sampling_params)
    if req.sampling_params.grammar:
        raise ValueError(BEAM_WITH_GRAMMAR)
    beam = req.beam_search
    return BeamSearchParams(
        beam_width=beam.beam_width,
        max_tokens=beam.max_tokens or 2**31 - 1,  # unset: the engine caps it to what fits
        ignore_eos=beam.ignore_eos,
        length_penalty=beam.length_penalty,
        include_stop_str_in_output=beam.include_stop_str_in_output,
    )


def beam_search_params_to_proto(params: BeamSearchParams) -> pb.BeamSearchParams:
    return pb.BeamSearchParams(
        beam_width=params.beam_width, max_tokens=params.max_tokens,
        ignore_eos=params.ignore_eos, length_penalty=params.length_penalty,
        include_stop_str_in_output=params.include_stop_str_in_output,
    )


def sampling_params_to_proto(params: SamplingParams) -> pb.SamplingParams:
    """For clients written in Python (tests, the Python frontend's gRPC mode)."""
    msg = pb.SamplingParams()
    for f in _OPTIONAL_FIELDS:
        value = getattr(params, f)
        if value is not None:
            setattr(msg, f, value)
    msg.stop_token_ids.extend(params.stop_token_ids)
    for token, bias in (params.logit_bias or {}).items():
        msg.logit_bias[token] = bias
    if (grammar := params.grammar) is not None:
        msg.grammar = grammar
    if params.cache_salt is not None:
        msg.cache_salt = params.cache_salt
    msg.allowed_token_ids.extend(params.allowed_token_ids or [])
    msg.bad_words.extend(params.bad_words or [])
    return msg


def position_logprobs(entry: LogprobsDict, token: int, num_top: int) -> pb.PositionLogprobs:
    """The chosen token, and the num_top best (the chosen one may or may not be among them)."""
    chosen = entry[token]
    top = sorted(entry.items(), key=lambda item: item[1].rank)[:num_top]
    msg = pb.PositionLogprobs(
        token=pb.TokenLogprob(token_id=token, logprob=chosen.logprob, rank=chosen.rank)
    )
    msg.top.extend(
        pb.TokenLogprob(token_id=t, logprob=lp.logprob, rank=lp.rank) for t, lp in top
    )
    return msg


def first_position(token_id: int) -> pb.PositionLogprobs:
    """The first prompt token has nothing before it to be predicted from (echo still shows it)."""
    return pb.PositionLogprobs(token=pb.TokenLogprob(token_id=token_id, logprob=math.nan))
