"""One token budget per step: running sequences first, then waiting ones in policy order.

The policy (vLLM's --scheduling-policy) orders the waiting queue: "fcfs" by arrival, a
preempted sequence at the front; "priority" by (Request.priority, arrival), lower first. Under
"priority" the running list is kept in the same order, so the preemption victim taken from its
back is the lowest-priority, latest-arrived sequence, as in vLLM.

There are no separate prefill and decode phases: a step's batch mixes decode tokens with
prompt chunks. When KV blocks run out, the most recently arrived running sequence is
preempted by recompute (its blocks freed, its tokens prefilled again later); a beam is
preempted with its whole group. A beam that has its step's candidates waits (no tokens)
until the rest of its group has them too. A beam group holds `beam_width` of max_num_seqs'
seats from its first running beam to its last, so its forks never push the running set
past max_num_seqs (nor the model runner's batch rows).

With speculative decoding (a proposer given), a decoding sequence that may speculate gets
the proposer's drafts and 1 + len(drafts) tokens of budget and KV slots; drafts are cut to
the budget and to the sequence's max tokens, and dropped when their blocks are not free:
nothing is ever preempted for drafts.
"""

from __future__ import annotations

import bisect
import time
from collections import deque

from hybridllm.config import SchedulerConfig
from hybridllm.core.kv_cache_manager import KVCacheManager
from hybridllm.sequence import Sequence, SequenceStatus
from hybridllm.spec_decode.ngram_proposer import NgramProposer
from hybridllm.step_types import SchedulerOutput


def _rank(seq: Sequence) -> tuple[int, float]:
    """The priority policy's order: lower priority value first, then earlier arrival."""
    return seq.request.priority, seq.request.arrival_time


class Scheduler:
    def __init__(self, config: SchedulerConfig, kv: KVCacheManager,
                 proposer: NgramProposer | None = None) -> None:
        self.config = config
        self.kv = kv
        self.proposer = proposer
        self.by_priority = config.policy == "priority"
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.num_preemptions = 0
        self.blocks_to_copy: list[tuple[int, int]] = []  # forks' copies, for the next step
        self.num_seats = 0  # of max_num_seqs: a running sequence 1, a running beam group its width
        self._beams_running: dict[str, int] = {}  # request id → its beams in `running`

    def add(self, seq: Sequence) -> None:
        if self.by_priority:  # after the waiting sequences of the same rank
            self.waiting.insert(bisect.bisect_right(self.waiting, _rank(seq), key=_rank), seq)
        else:
            self.waiting.append(seq)

    def finish(self, seq: Sequence, reason: str, stop_reason: int | str | None = None) -> None:
        """End seq wherever it is and free its blocks."""
        if seq.is_finished:
            return
        if seq in self.running:
            self.running.remove(seq)
            self._leave(seq)
        elif seq in self.waiting:
            self.waiting.remove(seq)
        self.kv.free(seq)
        seq.finish(reason, stop_reason)

    def drop_beam(self, seq: Sequence) -> None:
        """A beam the group no longer keeps: out of the queues, its blocks freed now."""
        if seq in self.running:
            self.running.remove(seq)
            self._leave(seq)
        elif seq in self.waiting:
            self.waiting.remove(seq)
        self.kv.free(seq)
        seq.status = SequenceStatus.FINISHED

    def add_fork(self, parent: Sequence, child: Sequence) -> None:
        """Run child (forked from the running beam parent) right after it, on parent's KV."""
        copy = self.kv.fork(parent, child)
        if copy is not None:
            self.blocks_to_copy.append(copy)
        child.status = SequenceStatus.RUNNING
        self.running.insert(self.running.index(parent) + 1, child)
        self._enter(child)  # no new seat: the group holds its width already

    def schedule(self) -> SchedulerOutput:
        out = SchedulerOutput(every_chunk_ends=True)
        budget = self.config.max_num_batched_tokens
        # Runs for every running sequence every step: names bound once, no property calls,
        # and allocate() only where the last block is full.
        running, bs = self.running, self.kv.block_size
        if self.by_priority:  # timsort: linear on the already ordered list of last step
            running.sort(key=_rank)
        seqs, news = out.seqs, out.num_new_tokens
        # A preemption pops from the end of `running`; the iterator never reaches what left.
        for seq in running:
            if budget <= 0:
                break
            computed = seq.num_computed_tokens
            num_new = len(seq.token_ids) - computed
            if num_new > budget:
                num_new = budget
                out.every_chunk_ends = False
            if not num_new:  # a beam waiting for its group's candidates
                continue
            if (num_new == 1 and budget > 1 and seq.spec_enabled and self.proposer is not None
                    and self._schedule_drafts(seq, budget)):
                num_new += len(seq.spec_token_ids)
                out.num_draft_tokens += num_new - 1
                seqs.append(seq)
                news.append(num_new)
                budget -= num_new
                continue
            if computed + num_new > len(seq.block_table) * bs and not self._make_room(
                seq, num_new, out
            ):
                break  # seq itself was preempted; nothing after it is running any more
            seqs.append(seq)
            news.append(num_new)
            budget -= num_new
        if out.num_preempted == 0:
            budget = self._admit_waiting(out, budget)
        elif any(seq.beam_topk for seq in self.waiting):
            self._preempt_beam_groups(out)
        if self.blocks_to_copy and out.seqs:
            out.blocks_to_copy, self.blocks_to_copy = self.blocks_to_copy, []
        return out

    def _schedule_drafts(self, seq: Sequence, budget: int) -> bool:
        """Give the decoding seq its drafts and their blocks; False (seq unchanged) if there
        are none, or no free blocks for them (drafts never preempt)."""
        # Drafts past max_tokens would be thrown away: the step emits at most 1 + drafts.
        k = min(self.proposer.k, budget - 1, seq.max_num_tokens - len(seq.token_ids) - 1)
        drafts = self.proposer.propose(seq.token_ids, k) if k > 0 else []
        if not drafts or not self.kv.allocate(seq, 1 + len(drafts)):
            return False
        seq.spec_token_ids = drafts
        return True

    def _make_room(self, seq: Sequence, num_new: int, out: SchedulerOutput) -> bool:
        """Blocks for seq's num_new tokens, preempting from the back of `running` until
        they fit; False if seq itself had to go."""
        while not self.kv.allocate(seq, num_new):
            victim = self.running.pop()
            self._preempt(victim)
            out.num_preempted += 1
            if victim is seq:
                return False
        return True

    def _preempt_beam_groups(self, out: SchedulerOutput) -> None:
        """A preempted beam takes its whole group with it (recomputed together)."""
        for request in {id(s.request): s.request for s in self.waiting if s.beam_topk}.values():
            for seq in request.seqs:
                if seq.status is SequenceStatus.RUNNING:
                    self.running.remove(seq)
                    self._preempt(seq)
                    out.num_preempted += 1
        kept = [(seq, n) for seq, n in zip(out.seqs, out.num_new_tokens)
                if seq.status is SequenceStatus.RUNNING]
        out.seqs = [seq for seq, _ in kept]
        out.num_new_tokens = [n for _, n in kept]

    def _admit_waiting(self, out: SchedulerOutput, budget: int) -> int:
        max_seats = self.config.max_num_seqs
        while self.waiting and budget > 0:
            seq = self.waiting[0]
            if self.num_seats + self._seats(seq) > max_seats:
                break
            cached = self.kv.find_cached_prefix(seq)
            num_cached = len(cached) * self.kv.block_size
            num_new = seq.num_tokens - num_cached
            if num_new > budget and not self.config.enable_chunked_prefill:
                break
            if num_new > budget:
                num_new = budget
                out.every_chunk_ends = False
            if not self.kv.allocate(seq, num_new, cached):
                break
            self.waiting.popleft()
            seq.num_computed_tokens = num_cached
            if not seq.ever_scheduled:
                seq.num_cached_tokens = num_cached
                seq.ever_scheduled = True
                # vLLM's RequestMetrics.time_in_queue: arrival to first scheduled.
                metrics = seq.request.metrics
                if "time_in_queue" not in metrics:
                    metrics["time_in_queue"] = time.monotonic() - seq.request.arrival_time
            seq.status = SequenceStatus.RUNNING
            self.running.append(seq)
            self._enter(seq)
            out.seqs.append(seq)
            out.num_new_tokens.append(num_new)
            budget -= num_new
        return budget

    def _seats(self, seq: Sequence) -> int:
        """The seats seq takes when it starts running: a beam group's width with its first
        running beam, none with the others."""
        if not seq.beam_topk:
            return 1
        return 0 if seq.request.request_id in self._beams_running else seq.request.beam_width

    def _enter(self, seq: Sequence) -> None:
        """seq has joined `running`."""
        self.num_seats += self._seats(seq)
        if seq.beam_topk:
            rid = seq.request.request_id
            self._beams_running[rid] = self._beams_running.get(rid, 0) + 1

    def _leave(self, seq: Sequence) -> None:
        """seq has left `running`."""
        if not seq.beam_topk:
            self.num_seats -= 1
            return
        rid = seq.request.request_id
        left = self._beams_running.pop(rid) - 1
        if left:
            self._beams_running[rid] = left
        else:
            self.num_seats -= seq.request.beam_width

    def _preempt(self, seq: Sequence) -> None:
        """seq, just taken out of `running`, goes back to the front of the queue."""
        self._leave(seq)
        self.kv.free(seq)
        seq.reset_for_recompute()
        if self.by_priority:  # before the waiting sequences of the same rank
            self.waiting.insert(bisect.bisect_left(self.waiting, _rank(seq), key=_rank), seq)
        else:
            self.waiting.appendleft(seq)
        self.num_preemptions += 1
