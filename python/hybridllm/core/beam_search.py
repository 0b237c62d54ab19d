"""One beam-search group's step: from every live beam's best continuations to the next live
beams and the finished list, by transformers' rules (`GenerationMixin._beam_search`), so its
results can be checked against transformers token for token.

Scores are fp32 as there: a candidate's cumulative logprob is its beam's plus the token's
log-softmax; a finished beam scores cum_logprob / generated_len ** length_penalty (the EOS
counted in the length); `early_stopping` False / True / "never" decide when the group ends.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from hybridllm.sampling_params import BeamSearchParams
from hybridllm.sequence import BeamResult

_NEG = -1.0e9  # transformers' "not a candidate" score


@dataclass
class BeamChoice:
    """A continuation kept running: live beam `parent` extended by `token`."""

    parent: int
    token: int
    cum_logprob: float


@dataclass
class BeamStepResult:
    running: list[BeamChoice]  # best first
    done: bool


@dataclass
class BeamGroup:
    params: BeamSearchParams
    eos_token_ids: frozenset[int]
    max_tokens: int
    finished: list[tuple[float, BeamResult]] = field(default_factory=list)  # best first

    @property
    def num_candidates(self) -> int:
        """transformers' beams_to_keep: enough that beam_width of them do not end."""
        return max(2, 1 + len(self.eos_token_ids)) * self.params.beam_width

    def step(
        self,
        cum_logprobs: list[float],
        candidates: list[tuple[list[float], list[int]]],
        outputs: list[list[int]],
    ) -> BeamStepResult:
        """Live beam i has cumulative logprob cum_logprobs[i], generated ids outputs[i] and
        its best continuations candidates[i]; all beams have generated the same count."""
        width, lp, early = self.params.beam_width, self.params.length_penalty, \
            self.params.early_stopping
        gen_len = len(outputs[0]) + 1  # generated length once this step's token is in
        values = torch.tensor([v for v, _ in candidates], dtype=torch.float32)
        acc = (torch.tensor(cum_logprobs, dtype=torch.float32)[:, None] + values).flatten()
        k = min(self.num_candidates, acc.numel())
        top_scores, top_idx = torch.topk(acc, k)
        per_beam = values.shape[1]
        picks = [(i // per_beam, candidates[i // per_beam][1][i % per_beam])
                 for i in top_idx.tolist()]
        at_max = gen_len >= self.max_tokens
        hits = torch.tensor([at_max or tok in self.eos_token_ids for _, tok in picks])
        # Next running beams: the best candidates that did not end.
        running_scores = top_scores + hits.float() * _NEG
        keep_scores, keep = torch.topk(running_scores, min(width, k))
        running = [BeamChoice(picks[j][0], picks[j][1], float(top_scores[j]))
                   for j in keep.tolist() if not hits[j]]
        # Finished beams: only among the best `width` candidates, unless the group is full
        # under early_stopping=True.
        full = len(self.finished) == width
        if not (full and early is True):
            penalized = top_scores / (gen_len**lp)
            for j in range(min(width, k)):
                if hits[j]:
                    parent, tok = picks[j]
                    is_eos = tok in self.eos_token_ids
                    ids = outputs[parent] + [tok]
                    self._add_finished(float(penalized[j]), BeamResult(
                        ids, float(top_scores[j]), float(penalized[j]),
                        "stop" if is_eos else "length", tok if is_eos else None,
                    ))
        return BeamStepResult(running, self._done(keep_scores, gen_len, bool(hits.all())))

    def _add_finished(self, score: float, result: BeamResult) -> None:
        # Ties keep the earlier entry first, as the merged top-k does in transformers.
        pos = next((i for i, (s, _) in enumerate(self.finished) if score > s),
                   len(self.finished))
        self.finished.insert(pos, (score, result))
        del self.finished[self.params.beam_width :]

    def _done(self, running_scores: torch.Tensor, gen_len: int, all_hit: bool) -> bool:
        p = self.params
        full = len(self.finished) == p.beam_width
        if all_hit or (full and p.early_stopping is True):
            return True
        if not full:
            return False
        if p.early_stopping == "never" and p.length_penalty > 0.0:
            best_len = self.max_tokens
        else:
            best_len = gen_len
        best_running = running_scores[:1] / (best_len**p.length_penalty)
        worst = torch.tensor(self.finished[-1][0], dtype=torch.float32)
        return not bool((best_running > worst).any())

    def results(self) -> list[BeamResult]:
        return [r for _, r in self.finished]
