"""One request's cumulative RequestOutputs as the per-step deltas of the proto contract."""

from __future__ import annotations

import grpc

from hybridllm.outputs import RequestOutput
from hybridllm.proto import engine_pb2 as pb
from hybridllm.sampling_params import BeamSearchParams, ParamError, SamplingParams
from hybridllm.server.proto_convert import FINISH_REASONS, first_position, position_logprobs


class ResponseBuilder:
    def __init__(self, request_id: str, params: SamplingParams | BeamSearchParams) -> None:
        self.request_id = request_id
        self.params = params
        self.n = params.beam_width if isinstance(params, BeamSearchParams) else params.n
        self.num_logprobs = getattr(params, "logprobs", None) or 0
        self.num_prompt_logprobs = getattr(params, "prompt_logprobs", None) or 0
        self.sent = [0] * self.n  # tokens already sent, per sequence
        self.first = True

    def response(self, out: RequestOutput) -> pb.GenerateResponse:
        """The tokens this step added (the first message also carries the prompt facts)."""
        resp = pb.GenerateResponse()
        self.fill(resp, out)
        return resp

    def fill(self, resp: pb.GenerateResponse, out: RequestOutput) -> None:
        """response(), written into an empty message (one inside a batch: no copy)."""
        sent = self.sent
        resp.request_id = self.request_id
        resp.finished = out.finished
        if self.first:
            self.first = False
            resp.prompt.CopyFrom(self._prompt_info(out))
        for o in out.outputs:
            new = o.token_ids[sent[o.index] :]
            if not new and o.finish_reason is None:
                continue
            delta = resp.sequences.add(
                index=o.index, token_ids=new, finish_reason=FINISH_REASONS[o.finish_reason]
            )
            if o.logprobs is not None:
                for j, token in enumerate(new):
                    entry = o.logprobs[sent[o.index] + j]
                    delta.logprobs.append(position_logprobs(entry, token, self.num_logprobs))
            if o.cumulative_logprob is not None:  # with logprobs, and every beam's
                delta.cumulative_logprob = o.cumulative_logprob
            if o.finish_reason == "stop" and isinstance(o.stop_reason, int):
                delta.stop_token_id = o.stop_reason
            elif o.finish_reason == "stop" and o.stop_reason is None and o.token_ids:
                delta.stop_token_id = o.token_ids[-1]  # the EOS token
            elif o.finish_reason == "error":  # this sequence alone (its grammar's dead end)
                resp.error = str(o.stop_reason)
                resp.error_param = "structured_outputs"  # the request's: a 400 naming it
            sent[o.index] = len(o.token_ids)

    def _prompt_info(self, out: RequestOutput) -> pb.PromptInfo:
        prompt = pb.PromptInfo(
            prompt_tokens=len(out.prompt_token_ids),
            cached_tokens=out.num_cached_tokens,
            queue_time_s=out.metrics.get("time_in_queue", 0.0),
        )
        if out.prompt_logprobs is not None:
            prompt.prompt_logprobs.append(first_position(out.prompt_token_ids[0]))
            k = self.num_prompt_logprobs
            for pos, entry in enumerate(out.prompt_logprobs[1:], start=1):
                prompt.prompt_logprobs.append(
                    position_logprobs(entry, out.prompt_token_ids[pos], k)
                )
        return prompt

    def error(self, message: str) -> pb.GenerateResponse:
        """Every sequence ends with FINISH_REASON_ERROR (the engine loop died)."""
        return pb.GenerateResponse(
            request_id=self.request_id,
            error=message,
            finished=True,
            sequences=[
                pb.SequenceDelta(index=i, finish_reason=pb.FINISH_REASON_ERROR)
                for i in range(self.n)
            ],
        )


def rejected(request_id: str, code: grpc.StatusCode, message: str,
             param: str = "") -> pb.GenerateResponse:
    return pb.GenerateResponse(
        request_id=request_id,
        finished=True,
        rejected=pb.RequestError(code=code.value[0], message=message, param=param),
    )


def refused(request_id: str, error: ValueError) -> pb.GenerateResponse:
    """A request the engine will not take (INVALID_ARGUMENT), naming the field it is about
    when the engine did (ParamError)."""
    param = error.param if isinstance(error, ParamError) else ""
    return rejected(request_id, grpc.StatusCode.INVALID_ARGUMENT, str(error), param)
