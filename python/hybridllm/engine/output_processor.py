"""From sequence state to RequestOutput, with text and stop strings when the engine owns text.

The offline `LLM` uses the API core's detokenizer and stop strings (`hybridllm._api`), the
code both HTTP frontends run, so its text equals theirs. The gRPC worker runs with
detokenize=False: there the frontend owns text and stop strings.
"""

from __future__ import annotations

from tokenizers import Tokenizer as HfTokenizer

from hybridllm import _api
from hybridllm.outputs import CompletionOutput, RequestOutput, TokenIdsView
from hybridllm.sequence import Request, Sequence


class _TextState:
    def __init__(self, seq: Sequence) -> None:
        p = seq.params
        self.seq_text = _api.SequenceText(
            seq.request.prompt_token_ids, list(p.stop), p.include_stop_str_in_output,
            p.skip_special_tokens, p.spaces_between_special_tokens)
        self.text = ""
        self.num_seen = 0

    def push(self, tok: _api.Tokenizer, ids: list[int], last: bool) -> tuple[str, str | None]:
        """The text `ids` add, and the stop string matched in it if any. `last`: the sequence
        ends with them (the engine has already cut a stop token), so what was held back comes
        out too, up to a match."""
        text, _, stop_reason = self.seq_text.push(tok, ids, "stop" if last else None)
        return text, stop_reason if isinstance(stop_reason, str) else None


class OutputProcessor:
    def __init__(self, tokenizer: HfTokenizer, detokenize: bool) -> None:
        # The worker leaves text to the frontend: it needs no decoding tokenizer.
        self.tokenizer = _api.Tokenizer.from_str(tokenizer.to_str()) if detokenize else None
        self.detokenize = detokenize
        self._text: dict[int, _TextState] = {}

    def update_text(self, seq: Sequence) -> str | None:
        """Detokenize seq's new tokens; return the stop string if one just matched."""
        if not self.detokenize:
            return None
        state = self._text.get(seq.seq_id)
        if state is None:
            state = self._text[seq.seq_id] = _TextState(seq)
        new = seq.output_token_ids[state.num_seen :]
        state.num_seen += len(new)
        if new and seq.finish_reason == "stop" and not isinstance(seq.stop_reason, str):
            new = new[:-1]  # the EOS / stop token id that ended it is not part of the text
        emitted, matched = state.push(self.tokenizer, new, seq.is_finished)
        state.text += emitted
        return matched

    def finish_text(self, seq: Sequence) -> None:
        """The sequence ended for its length after its token was added: release what was held."""
        state = self._text.get(seq.seq_id)
        if state is not None:
            state.text += state.push(self.tokenizer, [], True)[0]

    def text_of(self, seq: Sequence) -> str:
        state = self._text.get(seq.seq_id)
        return state.text if state is not None else ""

    def make_outputs(self, requests: list[Request]) -> list[RequestOutput]:
        """One output per request. Made for every running request every step, so the common
        case (one sequence, no text kept here: the gRPC worker) is built right in the loop,
        with no call per request: make_output's result, _completion and _output_ids inlined."""
        if self._text:
            return [self.make_output(r) for r in requests]
        out: list[RequestOutput] = []
        append = out.append
        for request in requests:
            seqs = request.seqs
            if request.beam_width or len(seqs) != 1:
                append(self.make_output(request))
                continue
            seq = seqs[0]
            lp = seq.params.logprobs is not None
            ids, reason = seq.token_ids, seq.finish_reason
            start = seq.num_prompt_tokens
            completion = CompletionOutput(
                seq.index, "",
                TokenIdsView(ids, start, len(ids)) if reason is None else ids[start:],
                seq.cumulative_logprob if lp else None, list(seq.output_logprobs) if lp else None,
                reason, seq.stop_reason,
            )
            append(RequestOutput(
                request.request_id, request.prompt, request.prompt_token_ids,
                request.prompt_logprobs, [completion], reason is not None,
                seq.num_cached_tokens, request.metrics,
            ))
        return out

    def make_output(self, request: Request) -> RequestOutput:
        if request.beam_width:
            return self._beam_output(request)
        seqs = request.seqs
        outputs = [self._completion(seq) for seq in seqs]
        finished = request.num_finished_seqs == len(outputs)
        if finished and self._text:
            for seq in seqs:
                self._text.pop(seq.seq_id, None)
        return RequestOutput(
            request.request_id, request.prompt, request.prompt_token_ids,
            request.prompt_logprobs, outputs, finished, seqs[0].num_cached_tokens,
            request.metrics,
        )

    def _completion(self, seq: Sequence) -> CompletionOutput:
        lp = seq.params.logprobs is not None
        state = self._text.get(seq.seq_id) if self._text else None
        return CompletionOutput(
            seq.index,
            state.text if state is not None else "",
            _output_ids(seq),
            seq.cumulative_logprob if lp else None,
            list(seq.output_logprobs) if lp else None,
            seq.finish_reason,
            seq.stop_reason,
        )

    def _beam_output(self, request: Request) -> RequestOutput:
        """A beam request reports nothing until it ends: then its best beams, best first."""
        outputs = [
            CompletionOutput(
                i,
                self.tokenizer.decode(r.token_ids) if self.detokenize else "",
                r.token_ids,
                r.cum_logprob,
                None,
                r.finish_reason,
                r.stop_reason,
            )
            for i, r in enumerate(request.beam_results or [])
        ]
        return RequestOutput(
            request_id=request.request_id,
            prompt=request.prompt,
            prompt_token_ids=request.prompt_token_ids,
            prompt_logprobs=None,
            outputs=outputs,
            finished=request.finished,
            num_cached_tokens=request.num_cached_tokens,
            metrics=request.metrics,
        )


def _output_ids(seq: Sequence) -> list[int] | TokenIdsView:
    """The output ids as of now (consumers may read them after later steps): a view of the
    append-only token list while the sequence runs, which copies nothing, then a list."""
    ids = seq.token_ids
    if seq.finish_reason is None:
        return TokenIdsView(ids, seq.num_prompt_tokens, len(ids))
    return ids[seq.num_prompt_tokens :]
