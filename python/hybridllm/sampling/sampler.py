"""The sampler: processed logits -> one token per row, plus logprobs when asked.

Logprobs are of the raw model distribution (before penalties, temperature and truncation),
as vLLM reports them by default. Seeded rows draw from their own generator, so a request's
samples do not depend on its batch mates.
"""

from __future__ import annotations

import torch

from hybridllm.kernels import sampler_cpu
from hybridllm.outputs import LogprobsDict
from hybridllm.sampling import processors
from hybridllm.sequence import Sequence
from hybridllm.step_types import SamplerOutput, TokenBitmask, top_logprobs


class Sampler:
    def __init__(self, vocab_size: int, eos_token_ids: tuple[int, ...], seed: int) -> None:
        self.vocab_size = vocab_size
        self.eos_token_ids = eos_token_ids
        self.generator = torch.Generator(device="cpu").manual_seed(seed)

    def __call__(
        self, logits: torch.Tensor, seqs: list[Sequence], bitmask: TokenBitmask | None = None
    ) -> SamplerOutput:
        logits = logits.float()
        if bitmask is not None:
            bitmask.apply(logits)  # first: the greedy path and the logprobs see it too
        if all(s.plain_greedy or _plain_greedy(s) for s in seqs):
            # Nothing to change in the logits and nothing to report but the argmax: skip the
            # copy of the [rows, vocab] logits that processing works on.
            n = len(seqs)
            return SamplerOutput(sampler_cpu.argmax_rows(logits).tolist(), [None] * n, [None] * n)
        want_lp = [s.params.logprobs is not None for s in seqs]
        raw_logprobs = logits.log_softmax(dim=-1) if any(want_lp) else None
        logits = self._process(logits.clone(), seqs)
        chosen = self._choose(logits, seqs)
        token_ids = chosen.tolist()
        logprobs: list[LogprobsDict | None] = [None] * len(seqs)
        sampled: list[float | None] = [None] * len(seqs)
        if raw_logprobs is not None:
            rows = [i for i, w in enumerate(want_lp) if w]
            idx = torch.tensor(rows)
            entries = top_logprobs(
                raw_logprobs[idx], chosen[idx], [seqs[i].params.logprobs or 0 for i in rows]
            )
            for i, entry in zip(rows, entries):
                logprobs[i] = entry
                sampled[i] = entry[token_ids[i]].logprob
        return SamplerOutput(token_ids, logprobs, sampled)

    def _process(self, logits: torch.Tensor, seqs: list[Sequence]) -> torch.Tensor:
        for i, s in enumerate(seqs):
            p = s.params
            if s.num_output_tokens < p.min_tokens and s.matcher is None:  # else in its bitmask
                stops = list(p.stop_token_ids) + ([] if p.ignore_eos else list(self.eos_token_ids))
                logits[i, stops] = processors.NEG_INF
            if p.logit_bias:
                ids = torch.tensor(list(p.logit_bias.keys()))
                logits[i, ids] += torch.tensor(list(p.logit_bias.values()))
            if p.allowed_token_ids is not None:
                allowed = torch.tensor(p.allowed_token_ids)
                kept = logits[i, allowed].clone()
                logits[i] = processors.NEG_INF
                logits[i, allowed] = kept
            if s.request.bad_words_ids:
                banned = processors.banned_tokens(s.request.bad_words_ids, s.output_token_ids)
                logits[i, banned] = processors.NEG_INF
        penalized = [
            i for i, s in enumerate(seqs)
            if s.params.repetition_penalty != 1.0
            or s.params.frequency_penalty != 0.0
            or s.params.presence_penalty != 0.0
        ]
        if penalized:
            rows = [seqs[i] for i in penalized]
            idx = torch.tensor(penalized)
            vocab = logits.shape[-1]
            prompt = processors.token_counts(
                [s.token_ids[: s.num_prompt_tokens] for s in rows], vocab, logits.device
            )
            output = processors.token_counts(
                [s.output_token_ids for s in rows], vocab, logits.device
            )
            logits[idx] = processors.apply_penalties(
                logits[idx],
                prompt,
                output,
                torch.tensor([s.params.repetition_penalty for s in rows]),
                torch.tensor([s.params.frequency_penalty for s in rows]),
                torch.tensor([s.params.presence_penalty for s in rows]),
            )
        return logits

    def _choose(self, logits: torch.Tensor, seqs: list[Sequence]) -> torch.Tensor:
        chosen = logits.argmax(dim=-1)
        rows = [i for i, s in enumerate(seqs) if not s.params.greedy]
        if not rows:
            return chosen
        ps = [seqs[i].params for i in rows]
        idx = torch.tensor(rows)
        x = logits[idx] / torch.tensor([p.temperature for p in ps])[:, None]
        if any(p.top_k > 0 or p.top_p < 1.0 or p.min_p > 0.0 for p in ps):
            x = processors.apply_top_k_top_p_min_p(
                x,
                torch.tensor([p.top_k for p in ps]),
                torch.tensor([p.top_p for p in ps]),
                torch.tensor([p.min_p for p in ps]),
            )
        probs = x.softmax(dim=-1)
        # Exponential race: argmax(p / E) with E ~ Exp(1) samples from p.
        noise = torch.empty(probs.shape)  # on CPU, where the generators live
        for j, i in enumerate(rows):
            noise[j].exponential_(generator=seqs[i].generator or self.generator)
        chosen[idx.to(chosen.device)] = (probs / noise.to(probs.device)).argmax(dim=-1)
        return chosen


def _plain_greedy(seq: Sequence) -> bool:
    """Greedy, with no logprobs and nothing that _process would apply to this row (the
    sequence's `plain_greedy` says the same once its min_tokens are behind it, or without)."""
    p = seq.params
    return p.plain_greedy_except_min_tokens() and (
        not p.min_tokens or seq.num_output_tokens >= p.min_tokens
    )
