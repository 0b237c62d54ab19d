"""A request and its n sequences, and a pooling (embedding) request, as the schedulers and the
model runners see them."""

from __future__ import annotations

import hashlib
import itertools
import time
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import torch

from hybridllm.outputs import LogprobsDict
from hybridllm.pooling_params import PoolingParams
from hybridllm.sampling_params import SamplingParams

_seq_ids = itertools.count()


class SequenceStatus(Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass
class BeamResult:
    """A finished beam: its generated ids, cumulative logprob and length-penalized score."""

    token_ids: list[int]
    cum_logprob: float
    score: float
    finish_reason: str  # "stop" (EOS) or "length"
    stop_reason: int | None = None


@dataclass
class Request:
    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    params: SamplingParams
    max_tokens: int
    arrival_time: float = field(default_factory=time.monotonic)
    priority: int = 0  # vLLM's: lower is scheduled sooner (--scheduling-policy priority)
    # params.bad_words as token-id sequences (text/bad_words.py)
    bad_words_ids: list[list[int]] = field(default_factory=list)
    seqs: list[Sequence] = field(default_factory=list)
    prompt_logprobs: list[LogprobsDict | None] | None = None
    first_token_time: float | None = None
    # vLLM's RequestMetrics that leave the engine: `time_in_queue` (arrival to first scheduled)
    metrics: dict[str, float] = field(default_factory=dict)
    reported_first: bool = False
    num_finished_seqs: int = 0  # kept by Sequence.finish: asked per request every step
    # Beam search: the group's width (0 = not a beam request) and, once it is done, its
    # best beams in score order (seqs then holds no live beam).
    beam_width: int = 0
    beam_results: list[BeamResult] | None = None

    @property
    def finished(self) -> bool:
        return self.num_finished_seqs == len(self.seqs)

    @property
    def num_cached_tokens(self) -> int:
        return self.seqs[0].num_cached_tokens if self.seqs else 0


class Sequence:
    """One of a request's n samples: prompt plus its own generated tokens."""

    def __init__(self, request: Request, index: int, generator: torch.Generator | None) -> None:
        self.seq_id = next(_seq_ids)
        self.request = request
        self.index = index
        self.params = request.params
        self.token_ids: list[int] = list(request.prompt_token_ids)
        self.num_prompt_tokens = len(request.prompt_token_ids)
        self.num_computed_tokens = 0
        self.num_cached_tokens = 0  # prefix-cache hit tokens at first scheduling
        self.block_table: list[int] = []
        # Sliding-window layers' own pool (KVCacheManager's WindowPool): their block table,
        # and the first of its blocks whose window block this sequence still holds.
        self.window_block_table: list[int] = []
        self.window_start = 0
        self.num_published_blocks = 0  # leading blocks whose prefix hashes are published
        self.block_hashes: list[bytes] = []  # hashes of this sequence's full blocks, in order
        # The parent of its first block's hash: b"", or a hash of its cache_salt (32 bytes
        # like any block's, so no salt can pose as a chain of unsalted blocks).
        salt = request.params.cache_salt
        self.cache_salt = (b"" if salt is None
                           else hashlib.sha256(b"cache_salt\0" + salt.encode()).digest())
        self.status = SequenceStatus.WAITING
        self.finish_reason: str | None = None
        self.stop_reason: int | str | None = None
        self.generator = generator
        self.output_logprobs: list[LogprobsDict] = []
        self.cumulative_logprob = 0.0
        self.num_preemptions = 0
        self.ever_scheduled = False
        # The sampler's argmax-only path takes this row every step (asked for every row).
        p = self.params
        self.plain_greedy = p.plain_greedy_except_min_tokens() and not p.min_tokens
        # Asked for every new token: the ids that stop it (the engine adds the EOS ids unless
        # ignore_eos) and the length at which it stops.
        self.stop_ids: frozenset[int] = frozenset(p.stop_token_ids)
        self.max_num_tokens = self.num_prompt_tokens + request.max_tokens
        # Beam search: candidates to keep per step (0 = not a beam), and this step's best
        # (logprob, token id) continuations until the whole group has them.
        self.beam_topk = 0
        self.beam_candidates: tuple[list[float], list[int]] | None = None
        # The output constraint's llguidance LLMatcher, advanced with each token (None: no
        # constraint, or finished). Preemption keeps it: the recomputed tokens are the ones
        # it has already consumed.
        self.matcher: Any = None
        # Speculative decoding: whether this sequence may get drafts (set by the engine: not
        # with a grammar or beams), and this step's drafts (set by the scheduler, consumed
        # by the engine when the step is applied).
        self.spec_enabled = False
        self.spec_token_ids: list[int] = []
        # Itself; a draft row's view (spec_decode/verify.py, a shallow copy) keeps pointing
        # here, so per-sequence state keyed by it (the GPU sampler's seeds) is shared.
        self.origin: Sequence = self

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.token_ids) - self.num_prompt_tokens

    @property
    def output_token_ids(self) -> list[int]:
        return self.token_ids[self.num_prompt_tokens :]

    @property
    def is_finished(self) -> bool:
        return self.status is SequenceStatus.FINISHED

    @property
    def wants_prompt_logprobs(self) -> bool:
        return self.index == 0 and self.params.prompt_logprobs is not None

    def finish(self, reason: str, stop_reason: int | str | None = None) -> None:
        if self.status is not SequenceStatus.FINISHED:
            self.request.num_finished_seqs += 1
        self.status = SequenceStatus.FINISHED
        self.finish_reason = reason
        self.stop_reason = stop_reason
        self.matcher = None  # freed now: an abort or a stop string ends it mid-grammar

    def reset_for_recompute(self) -> None:
        """Preempted: its KV is dropped; prompt and outputs so far are recomputed later."""
        self.num_computed_tokens = 0
        self.block_table = []
        self.num_published_blocks = 0
        self.status = SequenceStatus.WAITING
        self.num_preemptions += 1
        self.beam_candidates = None
        self.spec_token_ids = []


@dataclass(eq=False)  # identity: queues find and remove a request by itself, not its fields
class PoolingRequest:
    """One encoder input: computed whole in a single step (never split), no KV cache kept."""

    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    params: PoolingParams
    normalize: bool  # params.normalize, or the model's default where it was None
    arrival_time: float = field(default_factory=time.monotonic)
    pooled: torch.Tensor | None = None  # [hidden_size] on the CPU, once its step ran

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def finished(self) -> bool:
        return self.pooled is not None


def make_generator(seed: int | None, index: int) -> torch.Generator | None:
    """A per-sequence generator for seeded requests; None means the engine's shared one."""
    if seed is None:
        return None
    generator = torch.Generator(device="cpu")
    # Sample i of a seeded request gets its own stream, still fixed by (seed, i).
    generator.manual_seed((seed + index * 0x9E3779B97F4A7C15) % (2**63))
    return generator
