"""Builders for the scheduler and KV-cache tests, and the engine's bookkeeping after a step.

Everything runs without a model: `run_step` does what `LLMEngine.step_requests` does around
the forward pass (advance `num_computed_tokens`, publish full blocks, append a token to each
sequence whose chunk reached its end).
"""

from __future__ import annotations

from dataclasses import dataclass

from hybridllm.config import SchedulerConfig
from hybridllm.core.kv_cache_manager import KVCacheManager
from hybridllm.core.scheduler import Scheduler
from hybridllm.sampling_params import SamplingParams
from hybridllm.sequence import Request, Sequence
from hybridllm.step_types import reaches_end

BLOCK = 4  # block size of every test


def make_seq(
    tokens: list[int] | range, rid: str = "r", prompt_logprobs: int | None = None,
    priority: int = 0, arrival_time: float | None = None,
) -> Sequence:
    params = SamplingParams(prompt_logprobs=prompt_logprobs)
    request = Request(rid, None, list(tokens), params, max_tokens=64, priority=priority)
    if arrival_time is not None:
        request.arrival_time = arrival_time
    seq = Sequence(request, 0, None)
    request.seqs.append(seq)
    return seq


def make_scheduler(
    num_blocks: int = 64,
    budget: int = 64,
    max_num_seqs: int = 16,
    chunked: bool = True,
    prefix: bool = False,
    policy: str = "fcfs",
) -> Scheduler:
    config = SchedulerConfig(
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=budget,
        max_model_len=1024,
        enable_chunked_prefill=chunked,
        policy=policy,
    )
    return Scheduler(config, KVCacheManager(num_blocks, BLOCK, prefix))


def add(sched: Scheduler, rid: str, tokens: list[int] | range, priority: int = 0,
        arrival_time: float | None = None) -> Sequence:
    seq = make_seq(tokens, rid, priority=priority, arrival_time=arrival_time)
    sched.add(seq)
    return seq


@dataclass
class Step:
    plan: list[tuple[str, int]]  # (request id, num_new_tokens), in schedule order
    starts: list[int]  # each one's num_computed_tokens when scheduled
    sampled: list[str]  # request ids whose chunk reached the end and got a token
    num_preempted: int


def run_step(sched: Scheduler) -> Step:
    """schedule → (forward) → the engine's bookkeeping; returns what was scheduled."""
    out = sched.schedule()
    assert out.num_tokens <= sched.config.max_num_batched_tokens
    starts = [seq.num_computed_tokens for seq in out.seqs]
    sampling = [s for s, n in zip(out.seqs, out.num_new_tokens) if reaches_end(s, n)]
    for seq, n in zip(out.seqs, out.num_new_tokens):
        seq.num_computed_tokens += n
        sched.kv.cache_computed_blocks(seq)
    for seq in sampling:
        seq.token_ids.append(1000 + seq.num_tokens)  # a distinct token per position
    return Step(
        plan=[(s.request.request_id, n) for s, n in zip(out.seqs, out.num_new_tokens)],
        starts=starts,
        sampled=[s.request.request_id for s in sampling],
        num_preempted=out.num_preempted,
    )


def rids(seqs) -> list[str]:
    return [s.request.request_id for s in seqs]


def prefill(kv: KVCacheManager, seq: Sequence) -> bool:
    """Admit seq as the scheduler does (prefix hits first) and compute its whole prompt."""
    cached = kv.find_cached_prefix(seq)
    num_cached = len(cached) * kv.block_size
    if not kv.allocate(seq, seq.num_tokens - num_cached, cached):
        return False
    seq.num_computed_tokens = seq.num_tokens
    kv.cache_computed_blocks(seq)
    return True
