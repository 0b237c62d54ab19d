"""From sequence state to RequestOutput, with text and stop strings when the engine owns text.

The gRPC worker runs with detokenize=False: there the frontend owns text and stop strings.
"""

from __future__ import annotations

from tokenizers import Tokenizer

from hybridllm.core.sequence import Request, Sequence
from hybridllm.outputs import CompletionOutput, RequestOutput
from hybridllm.text.detokenizer import IncrementalDetokenizer
from hybridllm.text.stop import StopStringChecker


class _TextState:
    def __init__(self, tokenizer: Tokenizer, seq: Sequence) -> None:
        p = seq.params
        self.detok = IncrementalDetokenizer(tokenizer, p.skip_special_tokens)
        self.stops = StopStringChecker(list(p.stop), p.include_stop_str_in_output)
        self.num_seen = 0


class OutputProcessor:
    def __init__(self, tokenizer: Tokenizer, detokenize: bool) -> None:
        self.tokenizer = tokenizer
        self.detokenize = detokenize
        self._text: dict[int, _TextState] = {}

    def update_text(self, seq: Sequence) -> str | None:
        """Detokenize seq's new tokens; return the stop string if one just matched."""
        if not self.detokenize:
            return None
        state = self._text.get(seq.seq_id)
        if state is None:
            state = self._text[seq.seq_id] = _TextState(self.tokenizer, seq)
        new = seq.output_token_ids[state.num_seen :]
        state.num_seen += len(new)
        if new and seq.finish_reason == "stop" and not isinstance(seq.stop_reason, str):
            new = new[:-1]  # the EOS / stop token id that ended it is not part of the text
        state.stops.add(state.detok.add(new))
        return state.stops.stopped_by

    def text_of(self, seq: Sequence) -> str:
        state = self._text.get(seq.seq_id)
        return state.stops.text if state is not None else ""

    def make_output(self, request: Request) -> RequestOutput:
        outputs = []
        for seq in request.seqs:
            outputs.append(
                CompletionOutput(
                    index=seq.index,
                    text=self.text_of(seq),
                    token_ids=list(seq.output_token_ids),
                    cumulative_logprob=(
                        seq.cumulative_logprob if seq.params.logprobs is not None else None
                    ),
                    logprobs=list(seq.output_logprobs) if seq.params.logprobs is not None else None,
                    finish_reason=seq.finish_reason,
                    stop_reason=seq.stop_reason,
                )
            )
        finished = request.finished
        if finished:
            for seq in request.seqs:
                self._text.pop(seq.seq_id, None)
        return RequestOutput(
            request_id=request.request_id,
            prompt=request.prompt,
            prompt_token_ids=request.prompt_token_ids,
            prompt_logprobs=request.prompt_logprobs,
            outputs=outputs,
            finished=finished,
            num_cached_tokens=request.num_cached_tokens,
        )
