"""The persistent batch (executor/input_batch.py) against a from-scratch build of the same
step: sequences joining, leaving, reordered, preempted and recomputed, growing across block
boundaries, prefix hits, chunked prefill and prompt logprobs must all give exactly the inputs
that building every list anew from the schedule gives (the runner's code before the batch)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from hybridllm.core.scheduler import Scheduler
from hybridllm.executor.input_batch import InputBatch, PreparedBatch
from hybridllm.step_types import SchedulerOutput, reaches_end
from tests.core.helpers import BLOCK, add, make_scheduler, make_seq


def from_scratch(sched: SchedulerOutput, bs: int) -> dict:
    """Every input rebuilt from Python lists, one token at a time."""
    ids, positions, slots, cu, seq_lens, q_lens = [], [], [], [0], [], []
    sample_rows, sample_seqs, prompt_lp = [], [], []
    for seq, n in zip(sched.seqs, sched.num_new_tokens):
        start = seq.num_computed_tokens
        row0 = len(ids)
        ids.extend(seq.token_ids[start : start + n])
        positions.extend(range(start, start + n))
        slots.extend(seq.block_table[p // bs] * bs + p % bs for p in range(start, start + n))
        cu.append(len(ids))
        seq_lens.append(start + n)
        q_lens.append(n)
        if reaches_end(seq, n):
            sample_rows.append(len(ids) - 1)
            sample_seqs.append(seq)
        if seq.wants_prompt_logprobs and start < seq.num_prompt_tokens - 1:
            end = min(start + n, seq.num_prompt_tokens - 1)
            prompt_lp.append((seq, start, list(range(row0, row0 + end - start))))
    width = max(len(s.block_table) for s in sched.seqs)
    tables = np.zeros((len(sched.seqs), width), dtype=np.int32)
    for r, seq in enumerate(sched.seqs):
        tables[r, : len(seq.block_table)] = seq.block_table
    return dict(input_ids=ids, positions=positions, slot_mapping=slots, cu_seqlens_q=cu,
                seq_lens=seq_lens, block_tables=tables, query_lens=q_lens,
                seq_lens_host=seq_lens, sample_rows=sample_rows,
                sample_seqs=[s.seq_id for s in sample_seqs],
                prompt_lp=[(s.seq_id, a, r) for s, a, r in prompt_lp])


def assert_same(got: PreparedBatch, want: dict) -> None:
    dtypes = dict(input_ids=np.int64, positions=np.int64, slot_mapping=np.int64,
                  cu_seqlens_q=np.int32, seq_lens=np.int32, block_tables=np.int32)
    for name, dtype in dtypes.items():
        arr = getattr(got, name)
        assert arr.dtype == dtype, name
        np.testing.assert_array_equal(arr, np.asarray(want[name], dtype=dtype), err_msg=name)
        assert arr.shape == np.asarray(want[name]).shape, name
    assert got.query_lens == want["query_lens"]
    assert got.seq_lens_host == want["seq_lens_host"]
    assert got.sample_rows == want["sample_rows"]
    assert [s.seq_id for s in got.sample_seqs] == want["sample_seqs"]
    assert [(s.seq_id, a, r) for s, a, r in got.prompt_lp] == want["prompt_lp"]


def test_decode_steps_cross_block_boundaries_and_patch_only_new_blocks():
    sched = make_scheduler(num_blocks=256, budget=256, max_num_seqs=8)
    seqs = [add(sched, f"r{i}", range(10 * i + 1, 10 * i + 3 + i)) for i in range(6)]
    batch = InputBatch(max_num_seqs=8, max_blocks_per_seq=64, block_size=BLOCK)
    for _ in range(3 * BLOCK + 1):
        out = sched.schedule()
        assert_same(batch.prepare(out), from_scratch(out, BLOCK))
        _advance(sched, out)
    assert all(len(s.block_table) >= 4 for s in seqs)  # several boundaries crossed
    # The same schedule again (as bench/decode_gpu.py --runner repeats one): nothing is
    # written, and the inputs are still exact.
    out = sched.schedule()
    batch.prepare(out)
    before = batch.block_table.copy()
    assert_same(batch.prepare(out), from_scratch(out, BLOCK))
    np.testing.assert_array_equal(batch.block_table, before)


@pytest.mark.parametrize("seed", range(6))
def test_random_schedules_match_a_from_scratch_build(seed):
    """Real scheduler and KV manager under pressure: admissions, chunked prefill, prefix
    hits, preemption and recompute, finishes; each step's inputs equal the rebuilt ones."""
    rng = random.Random(seed)
    sched = make_scheduler(num_blocks=24, budget=24, max_num_seqs=6, prefix=True)
    batch = InputBatch(max_num_seqs=6, max_blocks_per_seq=8, block_size=BLOCK)
    shared = list(range(500, 500 + 2 * BLOCK))  # a prefix several prompts share
    live, n = [], 0
    preempted = rejoined = 0
    for _ in range(120):
        if rng.random() < 0.3:
            head = shared if rng.random() < 0.5 else []
            tokens = head + [rng.randrange(1, 400) for _ in range(rng.randint(1, 14))]
            seq = make_seq(tokens, f"r{n}", prompt_logprobs=rng.choice([None, None, 2]))
            sched.add(seq)
            live.append(seq)
            n += 1
        if live and rng.random() < 0.15:
            sched.finish(live.pop(rng.randrange(len(live))), "abort")
        out = sched.schedule()
        preempted += out.num_preempted
        if out.seqs:
            if rng.random() < 0.2:  # the batch does not rely on the scheduler's order
                pairs = list(zip(out.seqs, out.num_new_tokens))
                rng.shuffle(pairs)
                out.seqs = [s for s, _ in pairs]
                out.num_new_tokens = [n for _, n in pairs]
            rejoined += sum(s.num_preemptions > 0 for s in out.seqs)
            assert_same(batch.prepare(out), from_scratch(out, BLOCK))
            _advance(sched, out)
        for seq in [s for s in live if s.num_tokens >= 40]:
            sched.finish(seq, "length")
            live.remove(seq)
        assert batch.num_rows <= 6
    assert preempted > 0 and rejoined > 0  # the run did exercise recompute


def test_rows_and_columns_grow_past_the_configured_size():
    """A caller outside the scheduler's limits (more sequences, longer tables) still gets
    exact inputs: the arrays grow."""
    sched = make_scheduler(num_blocks=512, budget=512, max_num_seqs=16)
    for i in range(5):
        add(sched, f"r{i}", range(1, 2 + 9 * i))
    batch = InputBatch(max_num_seqs=2, max_blocks_per_seq=1, block_size=BLOCK)
    for _ in range(6):
        out = sched.schedule()
        assert_same(batch.prepare(out), from_scratch(out, BLOCK))
        _advance(sched, out)
    assert batch.block_table.shape[0] >= 5 and batch.block_table.shape[1] >= 11


def test_a_recomputed_sequence_gets_its_new_blocks_not_its_old_row():
    """Same sequence, same block count, different blocks (freed and allocated again): the
    row is rewritten, because the block table is a new list."""
    sched = make_scheduler(num_blocks=64, budget=64, max_num_seqs=4)
    a = add(sched, "a", range(1, 7))
    b = add(sched, "b", range(11, 17))
    batch = InputBatch(max_num_seqs=4, max_blocks_per_seq=8, block_size=BLOCK)
    out = sched.schedule()
    batch.prepare(out)
    _advance(sched, out)
    old = list(a.block_table)
    sched.kv.free(a)  # its blocks go to the back of the free list: it gets others now
    a.num_computed_tokens = 0
    assert sched.kv.allocate(a, a.num_tokens)
    assert len(a.block_table) == len(old) and a.block_table != old
    out = SchedulerOutput([b, a], [1, a.num_tokens])
    assert_same(batch.prepare(out), from_scratch(out, BLOCK))


def _advance(sched: Scheduler, out: SchedulerOutput) -> None:
    """The engine's bookkeeping after the forward pass (as tests/core's run_step)."""
    for seq, n in zip(out.seqs, out.num_new_tokens):
        seq.num_computed_tokens += n
        sched.kv.cache_computed_blocks(seq)
    for seq in out.seqs:
        if seq.num_computed_tokens == seq.num_tokens:
            seq.token_ids.append(1000 + seq.num_tokens)

