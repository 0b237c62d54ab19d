"""Beam-search requests in the engine: one request, `beam_width` live beams as sequences that
the scheduler runs with everything else. Each beam's step ends with its best continuations
(the runner's fp32 log-softmax); once every live beam of a group has them, the group takes
one step (core/beam_search.py): beams that are kept extend in place, the others are dropped
at once (their blocks freed), and extra children fork off their parent sharing its KV blocks
(the last partial block copied). Synchronous: the next block tables depend on the choice.
"""

from __future__ import annotations

from hybridllm.core.beam_search import BeamGroup
from hybridllm.core.scheduler import Scheduler
from hybridllm.sampling_params import BeamSearchParams, ParamError, SamplingParams
from hybridllm.sequence import Request, Sequence


class BeamGroups:
    def __init__(self, scheduler: Scheduler, eos_token_ids: frozenset[int]) -> None:
        self.scheduler = scheduler
        self.eos_token_ids = eos_token_ids
        self.groups: dict[str, BeamGroup] = {}
        self.num_generated = 0  # tokens the live beams took (beam_width a step, at most)

    @staticmethod
    def sampling_params(params: BeamSearchParams) -> SamplingParams:
        """What a beam's own sequence runs with: greedy (its token is picked by the group)."""
        return SamplingParams(temperature=0.0, max_tokens=params.max_tokens,
                              ignore_eos=params.ignore_eos)

    def add(self, request: Request, params: BeamSearchParams) -> Sequence:
        """Start the group on its prompt: one live beam until the first step forks it."""
        max_seqs = self.scheduler.config.max_num_seqs
        if params.beam_width > max_seqs:  # it could never be admitted
            raise ParamError(
                "beam_width",
                f"beam_width ({params.beam_width}) must be at most max_num_seqs ({max_seqs}, "
                f"--max-num-seqs): a beam search runs beam_width sequences at once.")
        group = BeamGroup(params, self.eos_token_ids, request.max_tokens)
        self.groups[request.request_id] = group
        request.beam_width = params.beam_width
        seq = Sequence(request, 0, None)
        seq.beam_topk = group.num_candidates
        request.seqs.append(seq)
        return seq

    def record(self, seq: Sequence, candidates: tuple[list[float], list[int]]) -> None:
        seq.beam_candidates = candidates

    def abort(self, request: Request) -> None:
        self.groups.pop(request.request_id, None)

    def advance(self, request: Request) -> None:
        """The group's step, once every live beam has its candidates."""
        beams = request.seqs
        if any(b.beam_candidates is None for b in beams):
            return
        group = self.groups[request.request_id]
        result = group.step(
            [b.cumulative_logprob for b in beams],
            [b.beam_candidates for b in beams],  # type: ignore[misc]
            [b.output_token_ids for b in beams],
        )
        for b in beams:
            b.beam_candidates = None
        kept = {c.parent for c in result.running} if not result.done else set()
        for i, b in enumerate(beams):
            if i not in kept:
                self.scheduler.drop_beam(b)  # frees its blocks before any fork takes one
        if result.done:
            self._finish(request, group)
            return
        # Forks first, from the parents as they are; then parents extend in place.
        new: list[Sequence] = []
        extend: list[tuple[Sequence, int, float]] = []
        for choice in result.running:
            parent = beams[choice.parent]
            if all(p is not parent for p, _, _ in extend):
                extend.append((parent, choice.token, choice.cum_logprob))
                new.append(parent)
                continue
            child = Sequence(request, 0, None)
            child.token_ids = parent.token_ids + [choice.token]
            child.cumulative_logprob = choice.cum_logprob
            child.beam_topk = parent.beam_topk
            self.scheduler.add_fork(parent, child)
            new.append(child)
        for parent, token, cum in extend:
            parent.token_ids.append(token)
            parent.cumulative_logprob = cum
        for i, seq in enumerate(new):
            seq.index = i
        request.seqs = new
        self.num_generated += len(new)

    def _finish(self, request: Request, group: BeamGroup) -> None:
        del self.groups[request.request_id]
        results = group.results()
        if not group.params.include_stop_str_in_output:
            for r in results:
                if r.finish_reason == "stop":
                    r.token_ids = r.token_ids[:-1]  # the EOS that ended it (vLLM's rule)
        request.beam_results = results
        request.seqs = []
        request.num_finished_seqs = 0
