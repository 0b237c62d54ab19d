"""Scheduler: token budget, chunked prefill, decode-first, preemption, prefix-cache hits.

Block size 4 throughout; `run_step` plays the engine's part after each schedule (see helpers).
"""

from __future__ import annotations

import random

from hybridllm.sequence import SequenceStatus
from tests.core.helpers import BLOCK, add, make_scheduler, rids, run_step


def test_budget_splits_exactly_across_a_mix() -> None:
    """A 10-token budget is filled in order, the last prompt getting only what is left."""
    sched = make_scheduler(budget=10)
    a, b, c = add(sched, "A", range(3)), add(sched, "B", range(5)), add(sched, "C", range(6))
    step = run_step(sched)
    assert step.plan == [("A", 3), ("B", 5), ("C", 2)]
    assert step.sampled == ["A", "B"]  # C's chunk stops short of its end
    step = run_step(sched)
    assert step.plan == [("A", 1), ("B", 1), ("C", 4)]
    assert step.starts == [3, 5, 2]
    assert run_step(sched).plan == [("A", 1), ("B", 1), ("C", 1)]
    assert (a.num_output_tokens, b.num_output_tokens, c.num_output_tokens) == (3, 3, 2)


def test_chunked_prefill_in_order_then_fcfs() -> None:
    """A 20-token prompt runs as chunks 8, 8, 4; later prompts follow in arrival order."""
    sched = make_scheduler(budget=8)
    a = add(sched, "A", range(20))
    add(sched, "B", range(5))
    add(sched, "C", range(3))
    computed = []
    for _ in range(2):
        step = run_step(sched)
        assert step.plan == [("A", 8)] and step.sampled == []
        computed.append(a.num_computed_tokens)
    assert computed == [8, 16]
    assert rids(sched.waiting) == ["B", "C"]
    step = run_step(sched)
    assert step.plan == [("A", 4), ("B", 4)]  # A's last chunk, then B's first
    assert step.starts == [16, 0] and step.sampled == ["A"]
    step = run_step(sched)
    assert step.plan == [("A", 1), ("B", 1), ("C", 3)]
    assert step.starts == [20, 4, 0] and step.sampled == ["A", "B", "C"]


def test_without_chunking_a_prompt_waits_for_room() -> None:
    """Chunking off: a prompt over the budget left waits, and nothing behind it jumps ahead."""
    sched = make_scheduler(budget=8, chunked=False)
    for rid, n in (("A", 6), ("B", 5), ("C", 2)):
        add(sched, rid, range(n))
    assert run_step(sched).plan == [("A", 6)]  # B (5) > 2 left; C (2) would fit but waits
    assert rids(sched.waiting) == ["B", "C"]
    assert run_step(sched).plan == [("A", 1), ("B", 5), ("C", 2)]


def test_prompt_over_whole_budget_runs_only_chunked() -> None:
    """A 9-token prompt with a budget of 8 never runs unchunked; chunked it runs as 8 + 1."""
    off = make_scheduler(budget=8, chunked=False)
    d = add(off, "D", range(9))
    assert run_step(off).plan == [] and run_step(off).plan == []
    assert d.status is SequenceStatus.WAITING and d.num_computed_tokens == 0
    assert d.block_table == [] and off.kv.num_free_blocks == off.kv.num_blocks
    on = make_scheduler(budget=8, chunked=True)
    add(on, "D", range(9))
    assert run_step(on).plan == [("D", 8)]
    assert run_step(on).plan == [("D", 1)]


def test_decodes_go_first_and_take_their_budget() -> None:
    """Running sequences are scheduled before waiting ones; a new prompt gets what remains."""
    sched = make_scheduler(budget=6)
    add(sched, "A", range(3))
    add(sched, "B", range(3))
    assert run_step(sched).plan == [("A", 3), ("B", 3)]
    add(sched, "C", range(10))
    assert run_step(sched).plan == [("A", 1), ("B", 1), ("C", 4)]
    assert run_step(sched).plan == [("A", 1), ("B", 1), ("C", 4)]
    step = run_step(sched)
    assert step.plan == [("A", 1), ("B", 1), ("C", 2)] and step.sampled == ["A", "B", "C"]


def test_decodes_can_starve_waiting_prompts() -> None:
    """With the budget used up by decodes, waiting prompts get nothing."""
    sched = make_scheduler(budget=3)
    for rid in "ABCDE":
        add(sched, rid, [7])
    assert run_step(sched).plan == [("A", 1), ("B", 1), ("C", 1)]
    assert run_step(sched).plan == [("A", 1), ("B", 1), ("C", 1)]
    assert rids(sched.waiting) == ["D", "E"]
    assert [s.num_computed_tokens for s in sched.waiting] == [0, 0]


def test_max_num_seqs_caps_running() -> None:
    """At most max_num_seqs run; the next one is admitted once one finishes."""
    sched = make_scheduler(budget=100, max_num_seqs=2)
    a = add(sched, "A", range(3))
    add(sched, "B", range(3))
    add(sched, "C", range(3))
    assert run_step(sched).plan == [("A", 3), ("B", 3)]
    assert run_step(sched).plan == [("A", 1), ("B", 1)]
    assert rids(sched.running) == ["A", "B"] and rids(sched.waiting) == ["C"]
    sched.finish(a, "length")
    assert a.block_table == [] and a.finish_reason == "length"
    assert run_step(sched).plan == [("B", 1), ("C", 3)]
    assert rids(sched.running) == ["B", "C"]


def test_preemption_takes_latest_arrivals_first() -> None:
    """Out of blocks, the last-arrived running sequences are preempted (C, then B itself),
    go back to the front of the waiting queue in arrival order, and are counted."""
    sched = make_scheduler(num_blocks=3)
    a, b, c = (add(sched, rid, range(4)) for rid in "ABC")
    assert run_step(sched).plan == [("A", 4), ("B", 4), ("C", 4)]
    assert (a.block_table, b.block_table, c.block_table) == ([0], [1], [2])
    add(sched, "D", range(2))
    step = run_step(sched)  # each needs a second block; none is free
    assert step.plan == [("A", 1)] and step.num_preempted == 2
    assert a.block_table == [0, 2]  # C's freed block
    assert rids(sched.running) == ["A"] and rids(sched.waiting) == ["B", "C", "D"]
    for seq in (b, c):
        assert seq.status is SequenceStatus.WAITING and seq.num_preemptions == 1
        assert seq.num_computed_tokens == 0 and seq.block_table == []
        assert seq.num_tokens == 5  # its sampled token is kept
    assert sched.num_preemptions == 2
    assert sched.kv.num_free_blocks == 1 and sched.kv.ref_counts == [1, 0, 1]


def test_preempted_sequence_recomputes_prompt_and_outputs() -> None:
    """A preempted sequence is rescheduled later and prefills all its tokens again."""
    sched = make_scheduler(num_blocks=3)
    a, c = add(sched, "A", range(4)), add(sched, "C", range(4))
    assert run_step(sched).plan == [("A", 4), ("C", 4)]
    step = run_step(sched)
    assert step.plan == [("A", 1)] and step.num_preempted == 1
    assert run_step(sched).plan == [("A", 1)]  # C (5 tokens, 2 blocks) does not fit in 1
    assert rids(sched.waiting) == ["C"] and sched.num_preemptions == 1
    sched.finish(a, "length")
    step = run_step(sched)
    assert step.plan == [("C", 5)] and step.starts == [0] and step.sampled == ["C"]
    assert c.num_computed_tokens == 5 and c.num_output_tokens == 2
    assert c.status is SequenceStatus.RUNNING and c.block_table == [1, 2]


def test_preempted_sequence_resumes_from_its_surviving_prefix() -> None:
    """With prefix caching, a preempted sequence's still-cached leading block is a hit on
    readmission, while its tail block (reused meanwhile) is recomputed."""
    sched = make_scheduler(num_blocks=3, prefix=True)
    a, b = add(sched, "A", [1, 2, 3, 4]), add(sched, "B", range(10, 18))
    assert run_step(sched).plan == [("A", 4), ("B", 8)]
    assert b.block_table == [1, 2]
    step = run_step(sched)
    assert step.plan == [("A", 1)] and step.num_preempted == 1
    assert a.block_table == [0, 2]  # B's tail block went first
    sched.finish(a, "length")
    step = run_step(sched)
    assert step.plan == [("B", 5)] and step.starts == [BLOCK]
    assert b.block_table == [1, 2, 0]
    assert b.num_cached_tokens == 0  # reported for its first scheduling only


def _shared_prefix_run(prefix: bool):
    sched = make_scheduler(prefix=prefix)
    a = add(sched, "A", range(10))
    assert run_step(sched).plan == [("A", 10)]
    b = add(sched, "B", [*range(8), 50, 51, 52])
    c = add(sched, "C", range(8))  # the whole prompt is two cached blocks
    return sched, a, b, c, run_step(sched)


def test_prefix_hits_skip_cached_blocks() -> None:
    """Later prompts start past A's cached full blocks, always leaving one token to compute."""
    sched, a, b, c, step = _shared_prefix_run(prefix=True)
    assert step.plan == [("A", 1), ("B", 3), ("C", 4)]
    assert step.starts == [10, 2 * BLOCK, 1 * BLOCK]
    assert (b.num_cached_tokens, c.num_cached_tokens) == (8, 4)
    assert (a.block_table, b.block_table, c.block_table) == ([0, 1, 2], [0, 1, 3], [0, 4])
    assert sched.kv.ref_counts[:5] == [3, 2, 1, 1, 1]
    assert sched.kv.prefix_hits == 12


def test_no_prefix_hits_with_caching_off() -> None:
    """Prefix caching off: the same prompts are computed in full, in blocks of their own."""
    sched, a, b, c, step = _shared_prefix_run(prefix=False)
    assert step.plan == [("A", 1), ("B", 11), ("C", 8)]
    assert step.starts == [10, 0, 0]
    assert (b.num_cached_tokens, c.num_cached_tokens) == (0, 0)
    assert (b.block_table, c.block_table) == ([3, 4, 5], [6, 7])
    assert sched.kv.ref_counts[:8] == [1] * 8
    assert sched.kv.prefix_hits == 0 and sched.kv.hash_to_block == {}


def test_no_prefix_hit_within_the_same_step() -> None:
    """Blocks are published only once computed: two equal prompts in one step both compute."""
    sched = make_scheduler(prefix=True)
    a, b = add(sched, "A", range(9)), add(sched, "B", range(9))
    assert run_step(sched).plan == [("A", 9), ("B", 9)]
    assert (a.num_cached_tokens, b.num_cached_tokens) == (0, 0)
    c = add(sched, "C", range(9))
    assert run_step(sched).plan == [("A", 1), ("B", 1), ("C", 1)]
    assert c.num_cached_tokens == 8 and c.block_table[:2] == a.block_table[:2]


def test_random_load_keeps_invariants_and_finishes() -> None:
    """Under a random load with preemptions, every step respects the budget and the seq cap,
    ref counts match the block tables, and every request finishes."""
    rng = random.Random(0)
    sched = make_scheduler(num_blocks=12, budget=16, max_num_seqs=4, prefix=True)
    kv, seqs = sched.kv, []
    for i in range(20):
        prompt = [rng.randrange(3) for _ in range(rng.randint(1, 20))]
        seqs.append(add(sched, f"R{i}", prompt))
    for _ in range(400):
        if all(s.is_finished for s in seqs):
            break
        run_step(sched)
        assert len(sched.running) <= 4
        for seq in list(sched.running):
            assert len(seq.block_table) * BLOCK >= seq.num_computed_tokens
            if seq.num_output_tokens >= 6:
                sched.finish(seq, "length")
        held = [b for s in sched.running for b in s.block_table]
        assert kv.ref_counts == [held.count(b) for b in range(kv.num_blocks)]
        assert sorted(kv.free_blocks) == [b for b in range(kv.num_blocks) if b not in held]
    assert all(s.is_finished for s in seqs)
    assert [s.num_output_tokens for s in seqs] == [6] * 20
    assert sched.num_preemptions > 0 and kv.num_free_blocks == 12
