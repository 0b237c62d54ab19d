"""Plain data one engine step passes between layers: the schedule (core → executor), what
attention is told about the flat batch (executor → models → attention → kernels), what the
sampler picked and how logprobs are reported (sampling ⇄ executor → engine); the same for a
pooling step (encoder batch, no KV cache).

A leaf module: it imports no layer of the package, so every layer can use it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from hybridllm.outputs import Logprob, LogprobsDict
from hybridllm.sequence import PoolingRequest, Sequence


def reaches_end(seq: Sequence, num_new_tokens: int) -> bool:
    """A chunk of num_new_tokens from seq.num_computed_tokens reaches the sequence's end, so
    its last row yields a new token."""
    return seq.num_computed_tokens + num_new_tokens == len(seq.token_ids)


@dataclass
class SchedulerOutput:
    """The step's batch: seqs[i] computes num_new_tokens[i] tokens from its
    num_computed_tokens, in this order. Two parallel lists rather than an object per
    sequence: the schedule is made for every running sequence every step."""

    seqs: list[Sequence] = field(default_factory=list)
    num_new_tokens: list[int] = field(default_factory=list)
    # Set by the scheduler when no chunk was cut short by the token budget: every sequence's
    # chunk reaches its end and samples (False: the runner checks each one).
    every_chunk_ends: bool = False
    num_preempted: int = 0
    # KV blocks to copy (src, dst) before the forward pass: forked beams' last partial blocks.
    blocks_to_copy: list[tuple[int, int]] = field(default_factory=list)
    has_beams: bool = False  # some beam group runs: the runner returns beam candidates
    # Draft tokens scheduled in all (speculative decoding): a sequence with drafts
    # (seq.spec_token_ids) computes 1 + len(drafts) tokens and samples a row for each.
    num_draft_tokens: int = 0

    @property
    def num_tokens(self) -> int:
        return sum(self.num_new_tokens)


@dataclass(frozen=True)
class WindowPool:
    """The sliding-window layers' own KV pool (executor/kv_cache.py sizes it, the core's
    KVCacheManager hands out its blocks): `num_blocks` blocks for the `layers`, whose widest
    window is `window` (a query at p sees keys p - window + 1 .. p)."""

    window: int
    num_blocks: int
    layers: tuple[int, ...]


@dataclass
class AttentionMetadata:
    """A flat batch of T query tokens from B sequences, grouped by sequence in order.

    Sequence i owns query rows cu_seqlens_q[i]:cu_seqlens_q[i+1]; they sit at the last
    query_len positions of its seq_lens[i] keys (the earlier ones are already cached), so one
    batch can mix whole prompts, prefill chunks on top of a cached prefix, and decode tokens.
    """

    slot_mapping: torch.Tensor  # [T] int64: cache slot (block * block_size + offset); -1 = skip
    cu_seqlens_q: torch.Tensor  # [B + 1] int32
    seq_lens: torch.Tensor  # [B] int32: keys per sequence after this step
    block_tables: torch.Tensor  # [B, max_blocks] int32: physical block of each logical block
    max_seqlen_q: int
    max_seqlen_k: int
    # Host copies, so backends can plan without a device sync.
    query_lens_host: list[int]
    seq_lens_host: list[int]
    # Per-step work a backend derives once and reuses in every layer (index plans, masks).
    backend_state: dict[str, Any] = field(default_factory=dict)
    # With a WindowPool: the same batch on the windowed layers' pool (their slots and block
    # tables), which those layers use instead.
    windowed: AttentionMetadata | None = None

    @property
    def num_seqs(self) -> int:
        return len(self.seq_lens_host)

    @property
    def is_pure_decode(self) -> bool:
        return self.max_seqlen_q == 1


@dataclass
class EncoderMetadata:
    """A flat batch of T tokens from B whole sequences, none of them cached: sequence i owns
    rows cu_seqlens[i]:cu_seqlens[i+1] and attends to all of them (bidirectional)."""

    cu_seqlens: torch.Tensor  # [B + 1] int64, on the model's device
    seq_lens_host: list[int]
    cu_seqlens_host: list[int]
    max_seqlen: int
    # Per-step work derived once and reused in every layer (the padded layout's index plan).
    backend_state: dict[str, Any] = field(default_factory=dict)

    @property
    def num_seqs(self) -> int:
        return len(self.seq_lens_host)


@dataclass
class PoolingSchedulerOutput:
    """One pooling step: whole requests, their tokens within the step's token budget."""

    requests: list[PoolingRequest] = field(default_factory=list)

    @property
    def num_tokens(self) -> int:
        return sum(r.num_tokens for r in self.requests)


@dataclass
class SamplerOutput:
    token_ids: list[int]
    logprobs: list[LogprobsDict | None]  # per row, when the row asked for logprobs
    sampled_logprobs: list[float | None]


def top_logprobs(
    logprobs: torch.Tensor, chosen: torch.Tensor, num_top: list[int]
) -> list[LogprobsDict]:
    """For each row: the chosen token's logprob and rank, and the row's num_top best tokens."""
    chosen_lp = logprobs.gather(1, chosen[:, None]).squeeze(1)
    ranks = (logprobs > chosen_lp[:, None]).sum(dim=1) + 1
    k = max(num_top, default=0)
    top_vals, top_ids = logprobs.topk(k, dim=-1) if k else (None, None)
    chosen_l, chosen_lp_l, ranks_l = chosen.tolist(), chosen_lp.tolist(), ranks.tolist()
    out: list[LogprobsDict] = []
    for i, n in enumerate(num_top):
        entry: LogprobsDict = {}
        if n:
            vals, ids = top_vals[i, :n].tolist(), top_ids[i, :n].tolist()
            for rank, (tok, val) in enumerate(zip(ids, vals), start=1):
                entry[tok] = Logprob(val, rank)
        entry.setdefault(chosen_l[i], Logprob(chosen_lp_l[i], ranks_l[i]))
        out.append(entry)
    return out


@dataclass
class TokenBitmask:
    """The tokens a step's constrained rows may take: bits[j] is row rows[j]'s mask, one bit
    per token id, 32 to an int32 word (llguidance's layout), and banned[j] the same unpacked
    (True: not allowed), made beside the bits off the critical path; unconstrained rows have
    none."""

    rows: list[int]
    bits: torch.Tensor  # [len(rows), ceil(vocab / 32)] int32, on the CPU
    banned: torch.Tensor  # [len(rows), vocab] bool, on the CPU (pinned where the model is CUDA)

    def apply(self, logits: torch.Tensor) -> None:
        """Disallowed tokens' logits to -inf, in place (before anything reads the logits)."""
        banned = self.banned.to(logits.device, non_blocking=True)
        if len(self.rows) == logits.shape[0]:
            logits.masked_fill_(banned, float("-inf"))
        else:
            idx = torch.tensor(self.rows, device=logits.device)
            logits[idx] = logits[idx].masked_fill_(banned, float("-inf"))

    def allows(self, j: int, token: int) -> bool:
        return not bool(self.banned[j, token])

    def allowed_ids(self, j: int) -> list[int]:
        return (~self.banned[j]).nonzero()[:, 0].tolist()


class TokenSampler(Protocol):
    """What the model runner asks of the sampler it is given: one token per row of `logits`
    (row i belongs to seqs[i]), with logprobs where the row's request asked for them; the
    rows `bitmask` constrains take only tokens it allows (and their logprobs are of the
    masked distribution, as vLLM reports them)."""

    def __call__(
        self, logits: torch.Tensor, seqs: list[Sequence], bitmask: TokenBitmask | None = None
    ) -> SamplerOutput: ...


@dataclass
class StepResult:
    sampled: SamplerOutput
    # The scheduled sequences whose chunk reaches their end, in schedule order (row i of
    # `sampled` is sample_seqs[i]'s token): the engine relies on that order.
    sample_seqs: list[Sequence]
    # seq_id -> (first prompt position predicted, entries) for this chunk
    prompt_logprobs: dict[int, tuple[int, list[LogprobsDict]]]
    # sample row -> its best (logprobs, token ids), for beam-search rows
    beam_candidates: dict[int, tuple[list[float], list[int]]] = field(default_factory=dict)
    # Speculative steps only (None otherwise): per sample_seqs[i], (first row of `sampled`,
    # tokens it emits): its accepted drafts then the bonus token, sampled[first:first + n].
    spec: list[tuple[int, int]] | None = None
