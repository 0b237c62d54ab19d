"""--scheduling-policy priority: the waiting queue in (priority, arrival) order, lower first;
preemption takes the lowest-priority running sequence (latest arrival among equals), and a
preempted sequence waits ahead of its equals but behind anything more urgent. The fcfs rows
are the control: the same requests, arrival order.

Block size 4 throughout; `run_step` plays the engine's part after each schedule (see helpers).
"""

from __future__ import annotations

from hybridllm.sequence import SequenceStatus
from tests.core.helpers import add, make_scheduler, rids, run_step


def _queue_and_admit_one_at_a_time(policy: str) -> list[str]:
    """One seat; A runs, then B (0), C (-1), D (5) and E (-1) queue in that order; the order
    in which they get the seat."""
    sched = make_scheduler(max_num_seqs=1, policy=policy)
    a = add(sched, "A", range(4), arrival_time=1.0)
    assert run_step(sched).plan == [("A", 4)]
    for t, (rid, prio) in enumerate((("B", 0), ("C", -1), ("D", 5), ("E", -1))):
        add(sched, rid, range(4), priority=prio if policy == "priority" else 0,
            arrival_time=2.0 + t)
    order, running = [], a
    while running is not None:
        sched.finish(running, "length")
        step = run_step(sched)
        running = next(iter(sched.running), None)
        if running is not None:
            assert step.plan == [(running.request.request_id, 4)]
            order.append(running.request.request_id)
    return order


def test_the_waiting_queue_is_ordered_by_priority_then_arrival() -> None:
    assert _queue_and_admit_one_at_a_time("priority") == ["C", "E", "B", "D"]
    assert _queue_and_admit_one_at_a_time("fcfs") == ["B", "C", "D", "E"]


def _preempt_one(policy: str) -> tuple[str, list[str]]:
    """X (priority 0, earlier) and Y (priority -1, later) fill all four blocks; the next step
    needs a fifth. Returns the preempted one and the step's plan."""
    sched = make_scheduler(num_blocks=4, policy=policy)
    x = add(sched, "X", range(8), priority=0, arrival_time=1.0)
    y = add(sched, "Y", range(8), priority=-1 if policy == "priority" else 0, arrival_time=2.0)
    run_step(sched)
    assert sched.kv.num_free_blocks == 0
    step = run_step(sched)
    assert step.num_preempted == 1 and sched.num_preemptions == 1
    (victim,) = [s for s in (x, y) if s.status is SequenceStatus.WAITING]
    assert rids(sched.waiting) == [victim.request.request_id]
    return victim.request.request_id, [rid for rid, _ in step.plan]


def test_preemption_takes_the_lowest_priority_not_the_latest_arrival() -> None:
    assert _preempt_one("priority") == ("X", ["Y"])
    assert _preempt_one("fcfs") == ("Y", ["X"])


def test_a_preempted_sequence_waits_behind_more_urgent_and_ahead_of_equal_ones() -> None:
    """X (0) is preempted while W (-2, more urgent) and V (0, arrived later than X... and
    than everything) wait: the queue reads W, X, V."""
    sched = make_scheduler(num_blocks=4, max_num_seqs=2, policy="priority")
    add(sched, "X", range(8), priority=0, arrival_time=1.0)
    add(sched, "Y", range(8), priority=-1, arrival_time=2.0)
    run_step(sched)
    add(sched, "V", range(4), priority=0, arrival_time=3.0)
    add(sched, "W", range(4), priority=-2, arrival_time=4.0)
    assert rids(sched.waiting) == ["W", "V"]
    step = run_step(sched)
    assert step.num_preempted == 1 and [rid for rid, _ in step.plan] == ["Y"]
    assert rids(sched.waiting) == ["W", "X", "V"]


def test_ties_keep_arrival_order_and_running_is_kept_in_rank_order() -> None:
    """Equal priorities: arrival order, as fcfs. The running list is re-sorted each step, so
    a late urgent arrival is scheduled first within the step's batch."""
    sched = make_scheduler(max_num_seqs=4, policy="priority")
    for t, rid in enumerate("ABC"):
        add(sched, rid, range(4), priority=1, arrival_time=float(t))
    assert run_step(sched).plan == [("A", 4), ("B", 4), ("C", 4)]
    add(sched, "U", range(4), priority=-5, arrival_time=9.0)
    assert run_step(sched).plan == [("A", 1), ("B", 1), ("C", 1), ("U", 4)]
    assert run_step(sched).plan == [("U", 1), ("A", 1), ("B", 1), ("C", 1)]
