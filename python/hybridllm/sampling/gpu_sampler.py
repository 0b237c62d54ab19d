"""The CUDA sampler: the Triton kernel (kernels/sampler.py) over per-row parameter tensors.

Same interface and logprobs as sampling.sampler.Sampler. The per-row tensors are built from
host lists in one pass and moved with two copies; the only device-to-host sync is the final
token list (plus the logprob values when some row asks for them). Randomness is Philox keyed by
(row seed, tokens generated so far), so a row's draw depends only on its own seed, step and
logits: a seeded request is reproducible whatever shares its batch. Unseeded sequences get a
random seed once, drawn from the engine's seed.
"""

from __future__ import annotations

import weakref

import torch

from hybridllm.kernels.sampler_ref import SamplingTensors
from hybridllm.outputs import LogprobsDict
from hybridllm.sampling.processors import banned_tokens
from hybridllm.sequence import Sequence
from hybridllm.step_types import SamplerOutput, TokenBitmask, top_logprobs

_GOLDEN = 0x9E3779B97F4A7C15  # per-sample offset, as core.sequence.make_generator uses
_SEED_MOD = 2**63


def _penalized(seq: Sequence) -> bool:
    p = seq.params
    return p.repetition_penalty != 1.0 or p.frequency_penalty != 0.0 or p.presence_penalty != 0.0


class GpuSampler:
    def __init__(
        self, vocab_size: int, eos_token_ids: tuple[int, ...], seed: int, device: torch.device
    ) -> None:
        self.vocab_size = vocab_size
        self.eos_token_ids = eos_token_ids
        self.device = device
        self.generator = torch.Generator(device="cpu").manual_seed(seed)
        # Weak keys: a finished sequence's seed goes with it, no bookkeeping by the engine.
        self._seeds: weakref.WeakKeyDictionary[Sequence, int] = weakref.WeakKeyDictionary()

    def row_seed(self, seq: Sequence) -> int:
        seed = seq.params.seed
        if seed is not None:
            return (seed + seq.index * _GOLDEN) % _SEED_MOD
        origin = seq.origin  # a draft row's view draws as its sequence does
        drawn = self._seeds.get(origin)
        if drawn is None:
            drawn = int(torch.randint(0, _SEED_MOD - 1, (1,), generator=self.generator))
            self._seeds[origin] = drawn
        return drawn

    def _to_device(self, host: torch.Tensor) -> torch.Tensor:
        if self.device.type == "cuda":
            return host.pin_memory().to(self.device, non_blocking=True)
        return host.to(self.device)

    def __call__(
        self, logits: torch.Tensor, seqs: list[Sequence], bitmask: TokenBitmask | None = None
    ) -> SamplerOutput:
        """logits: [B, V] fp32, owned by the caller's step (processed in place)."""
        logits = logits.float()
        if bitmask is not None:
            bitmask.apply(logits)  # first: the argmax path, the kernel and logprobs see it
        want_lp = [s.params.logprobs is not None for s in seqs]
        raw_logprobs = logits.log_softmax(dim=-1) if any(want_lp) else None
        self._mask_and_bias(logits, seqs)
        if all(s.params.greedy for s in seqs) and not any(_penalized(s) for s in seqs):
            chosen = logits.argmax(dim=-1)  # the kernel's greedy rows, without its set-up
        else:
            from hybridllm.kernels.sampler import sample

            chosen, _ = sample(logits, self.sampling_tensors(seqs))
        token_ids = chosen.tolist()
        logprobs: list[LogprobsDict | None] = [None] * len(seqs)
        sampled: list[float | None] = [None] * len(seqs)
        if raw_logprobs is not None:
            rows = [i for i, w in enumerate(want_lp) if w]
            idx = torch.tensor(rows, device=logits.device)
            entries = top_logprobs(
                raw_logprobs[idx], chosen[idx], [seqs[i].params.logprobs or 0 for i in rows]
            )
            for i, entry in zip(rows, entries):
                logprobs[i] = entry
                sampled[i] = entry[token_ids[i]].logprob
        return SamplerOutput(token_ids, logprobs, sampled)

    def _mask_and_bias(self, logits: torch.Tensor, seqs: list[Sequence]) -> None:
        """min_tokens (stop ids to -inf), logit_bias, then allowed_token_ids (every other
        id to -inf) and bad_words, as Sampler._process orders them; one scatter each, and
        only when some row needs it (the -inf of min_tokens and bad_words in one)."""
        mask_r: list[int] = []
        mask_c: list[int] = []
        bias_r: list[int] = []
        bias_c: list[int] = []
        bias_v: list[float] = []
        allow_rows: list[int] = []
        allow_r: list[int] = []
        allow_c: list[int] = []
        for i, s in enumerate(seqs):
            p = s.params
            if s.num_output_tokens < p.min_tokens and s.matcher is None:  # else in its bitmask
                stops = list(p.stop_token_ids) + ([] if p.ignore_eos else list(self.eos_token_ids))
                mask_r += [i] * len(stops)
                mask_c += stops
            if p.logit_bias:
                bias_r += [i] * len(p.logit_bias)
                bias_c += list(p.logit_bias.keys())
                bias_v += list(p.logit_bias.values())
            if p.allowed_token_ids is not None:
                allow_rows.append(i)
                allow_r += [i] * len(p.allowed_token_ids)
                allow_c += p.allowed_token_ids
            if s.request.bad_words_ids:
                banned = banned_tokens(s.request.bad_words_ids, s.output_token_ids)
                mask_r += [i] * len(banned)
                mask_c += banned
        if mask_r:
            idx = self._to_device(torch.tensor([mask_r, mask_c], dtype=torch.int64))
            logits.index_put_((idx[0], idx[1]), torch.tensor(float("-inf"), device=logits.device))
        if bias_r:
            idx = self._to_device(torch.tensor([bias_r, bias_c], dtype=torch.int64))
            vals = self._to_device(torch.tensor(bias_v, dtype=torch.float32))
            logits.index_put_((idx[0], idx[1]), vals, accumulate=True)
        if allow_rows:
            # Made on the device: only the row and id lists cross, not a [batch, vocab] mask.
            banned = torch.zeros(logits.shape, dtype=torch.bool, device=logits.device)
            banned[self._to_device(torch.tensor(allow_rows, dtype=torch.int64))] = True
            idx = self._to_device(torch.tensor([allow_r, allow_c], dtype=torch.int64))
            banned[idx[0], idx[1]] = False
            logits.masked_fill_(banned, float("-inf"))

    def sampling_tensors(self, seqs: list[Sequence]) -> SamplingTensors:
        floats: list[list[float]] = [[], [], [], [], [], []]
        ints: list[list[int]] = [[], [], []]
        for s in seqs:
            p = s.params
            row_f = (
                0.0 if p.greedy else p.temperature, p.top_p, p.min_p,
                p.repetition_penalty, p.presence_penalty, p.frequency_penalty,
            )
            for col, v in zip(floats, row_f):
                col.append(v)
            for col, v in zip(ints, (max(p.top_k, 0), self.row_seed(s), s.num_output_tokens)):
                col.append(v)
        # Row-major [6, B] / [3, B]: each parameter is a contiguous [B] row, as the kernel reads.
        f = self._to_device(torch.tensor(floats, dtype=torch.float32))
        n = self._to_device(torch.tensor(ints, dtype=torch.int64))
        prompt_counts = output_counts = None
        if any(_penalized(s) for s in seqs):
            prompt_counts = self._counts([s.token_ids[: s.num_prompt_tokens] for s in seqs])
            output_counts = self._counts([s.output_token_ids for s in seqs])
        return SamplingTensors(
            temperature=f[0], top_p=f[1], min_p=f[2], repetition_penalty=f[3],
            presence_penalty=f[4], frequency_penalty=f[5],
            top_k=n[0].to(torch.int32), seeds=n[1], steps=n[2],
            prompt_counts=prompt_counts, output_counts=output_counts,
        )

    def _counts(self, rows: list[list[int]]) -> torch.Tensor:
        """[B, V] int32 occurrences of each token id per row, one scatter on the device."""
        vocab = self.vocab_size
        counts = torch.zeros(len(rows) * vocab, dtype=torch.int32, device=self.device)
        flat = [i * vocab + t for i, row in enumerate(rows) for t in row]
        if flat:
            idx = self._to_device(torch.tensor(flat, dtype=torch.int64))
            counts.index_add_(0, idx, torch.ones_like(idx, dtype=torch.int32))
        return counts.view(len(rows), vocab)
