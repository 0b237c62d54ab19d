"""The persistent batch: each running sequence's block table kept in one host array across
steps (as vLLM v1's InputBatch / BlockTable do), patched only where a sequence joined, left or
got a new block, and the step's flat inputs computed from it with numpy vector ops.

Rebuilding the [B, max_blocks] table from Python lists every step (one tensor per row) was
most of a decode step's host time; here a step that changes nothing copies no table entry,
and the per-token work (positions, slots, sequence lengths) is vectorized.

A sequence keeps its row while it stays in the batch; a row is written whole when its
sequence (re)joins, and appended to when its block table grows. KV blocks are appended to a
sequence's block table, cut from its end only after a speculative step (rejected drafts'
blocks), and the table is replaced by a new list when its blocks are freed (finish,
preemption), so "same list object, same length" means "row up to date".
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hybridllm.sequence import Sequence
from hybridllm.step_types import SchedulerOutput


@dataclass
class PreparedBatch:
    """One step's flat inputs on the host, before they go to the device."""

    input_ids: np.ndarray  # [T] int64
    positions: np.ndarray  # [T] int64
    slot_mapping: np.ndarray  # [T] int64
    cu_seqlens_q: np.ndarray  # [B + 1] int32
    seq_lens: np.ndarray  # [B] int32
    block_tables: np.ndarray  # [B, width] int32, width = the longest table of the step
    query_lens: list[int]
    seq_lens_host: list[int]
    max_query_len: int
    max_seq_len: int
    sample_rows: list[int]
    sample_seqs: list[Sequence]
    # Prompt-logprob work: (sequence, first prompt position, flat rows) per chunk.
    prompt_lp: list[tuple[Sequence, int, list[int]]]
    # With a WindowPool: the windowed layers' slots and block tables.
    window_slot_mapping: np.ndarray | None = None
    window_block_tables: np.ndarray | None = None


class InputBatch:
    def __init__(self, max_num_seqs: int, max_blocks_per_seq: int, block_size: int) -> None:
        self.block_size = block_size
        self.block_table = np.zeros((max_num_seqs, max_blocks_per_seq), dtype=np.int32)
        # seq.window_block_table's rows (kept in step with block_table), when `windowed`.
        self.windowed = False
        self.window_table = np.zeros_like(self.block_table)
        self.num_blocks = np.zeros(max_num_seqs, dtype=np.int64)  # for vector ops
        self._num_blocks = [0] * max_num_seqs  # the same, for per-row checks
        self.row_of: dict[int, int] = {}  # seq_id -> row
        self._tables: list[list[int] | None] = [None] * max_num_seqs  # list object each row holds
        self._free_rows = list(range(max_num_seqs - 1, -1, -1))  # pop() takes the lowest
        self._last_seqs: list[Sequence] = []
        self._last_rows_l: list[int] = []
        self._last_rows = np.zeros(0, dtype=np.int64)

    @property
    def num_rows(self) -> int:
        return len(self.row_of)

    def update(self, seqs: list[Sequence]) -> np.ndarray:
        """Make the rows of `seqs` current; returns the row of each, in order."""
        if seqs != self._last_seqs:  # identity compare: only when membership or order changed
            self._remap(seqs)
        rows = self._last_rows
        tables, num_blocks = self._tables, self._num_blocks
        for seq, row in zip(seqs, self._last_rows_l):
            table = seq.block_table
            if table is not tables[row] or len(table) != num_blocks[row]:
                self._write_row(row, table, seq.window_block_table)
        return rows

    def _remap(self, seqs: list[Sequence]) -> None:
        keep = {s.seq_id for s in seqs}
        for seq_id in [i for i in self.row_of if i not in keep]:
            row = self.row_of.pop(seq_id)
            self._tables[row] = None
            self.block_table[row, : self._num_blocks[row]] = 0  # a free row is all zeros
            self.window_table[row, : self._num_blocks[row]] = 0
            self.num_blocks[row] = self._num_blocks[row] = 0
            self._free_rows.append(row)
        row_of = self.row_of
        rows = []
        for seq in seqs:
            row = row_of.get(seq.seq_id)
            if row is None:
                if not self._free_rows:
                    self._grow(rows=2 * len(self._tables))
                row = row_of[seq.seq_id] = self._free_rows.pop()
            rows.append(row)
        self._last_seqs = list(seqs)
        self._last_rows_l = rows
        self._last_rows = np.array(rows, dtype=np.int64)

    def _grow(self, rows: int = 0, cols: int = 0) -> None:
        """More rows or columns than configured (only a caller outside the scheduler's
        limits needs them): copy into larger arrays."""
        old_rows, old_cols = self.block_table.shape
        rows, cols = max(rows, old_rows), max(cols, old_cols)
        table = np.zeros((rows, cols), dtype=np.int32)
        table[:old_rows, :old_cols] = self.block_table
        self.block_table = table
        window = np.zeros((rows, cols), dtype=np.int32)
        window[:old_rows, :old_cols] = self.window_table
        self.window_table = window
        self.num_blocks = np.concatenate([self.num_blocks, np.zeros(rows - old_rows, np.int64)])
        self._num_blocks += [0] * (rows - old_rows)
        self._tables += [None] * (rows - old_rows)
        self._free_rows[:0] = range(rows - 1, old_rows - 1, -1)

    def _write_row(self, row: int, table: list[int], window: list[int]) -> None:
        n, old = len(table), self._num_blocks[row]
        if table is not self._tables[row]:  # a new table (joined, or recomputed): whole row
            self.block_table[row, n:old] = 0  # as a fresh build pads it
            self.window_table[row, n:old] = 0
            old = 0
        if n > self.block_table.shape[1]:
            self._grow(cols=max(n, 2 * self.block_table.shape[1]))
        if n > old:
            self.block_table[row, old:n] = table[old:]
            if self.windowed:
                self.window_table[row, old:n] = window[old:]
        elif n < old:  # cut after a speculative step: a row is zero past its blocks
            self.block_table[row, n:old] = 0
            if self.windowed:
                self.window_table[row, n:old] = 0
        self._tables[row] = table
        self.num_blocks[row] = self._num_blocks[row] = n

    def prepare(self, sched: SchedulerOutput) -> PreparedBatch:
        """The step's flat inputs: per sequence its query tokens, in schedule order."""
        seqs, q_lens = sched.seqs, sched.num_new_tokens
        rows = self.update(seqs)
        starts_l = [s.num_computed_tokens for s in seqs]
        starts = np.array(starts_l, dtype=np.int64)
        n = len(seqs)
        if sched.every_chunk_ends and sum(q_lens) == n:
            # Pure decode, the steady state: each row is its sequence's last token.
            ids = [s.token_ids[-1] for s in seqs]
            cu = np.arange(n + 1, dtype=np.int64)
            seq_lens = starts + 1
            positions, token_rows, max_q = starts, rows, 1
        else:
            q = np.array(q_lens, dtype=np.int64)
            seq_lens = starts + q
            cu = np.zeros(n + 1, dtype=np.int64)
            np.cumsum(q, out=cu[1:])
            ids = []
            for s, p, k in zip(seqs, starts_l, q_lens):
                ids.extend(s.token_ids[p : p + k])
                if sched.num_draft_tokens and s.spec_token_ids:  # the verify's query tokens
                    ids.extend(s.spec_token_ids)
            owner = np.repeat(np.arange(n), q)
            positions = np.arange(int(cu[-1]), dtype=np.int64) - cu[:-1][owner] + starts[owner]
            token_rows, max_q = rows[owner], max(q_lens)
        bs = self.block_size
        slots = self.block_table[token_rows, positions // bs].astype(np.int64) * bs
        offsets = positions % bs
        slots += offsets
        width = int(self.num_blocks[rows].max())
        window_slots = window_tables = None
        if self.windowed:
            window_slots = self.window_table[token_rows, positions // bs].astype(np.int64) * bs
            window_slots += offsets
            window_tables = self.window_table[rows, :width]
        if sched.num_draft_tokens:
            sample_rows, sample_seqs = _verify_rows(seqs, seq_lens, cu)
        elif sched.every_chunk_ends:
            sample_rows, sample_seqs = (cu[1:] - 1).tolist(), seqs
        else:
            totals = np.array([len(s.token_ids) for s in seqs], dtype=np.int64)
            samples = seq_lens == totals  # the chunk reaches the sequence's end
            sample_rows = (cu[1:][samples] - 1).tolist()
            sample_seqs = [s for s, m in zip(seqs, samples.tolist()) if m]
        seq_lens_host = seq_lens.tolist()
        return PreparedBatch(
            input_ids=np.array(ids, dtype=np.int64),
            positions=positions,
            slot_mapping=slots,
            cu_seqlens_q=cu.astype(np.int32),
            seq_lens=seq_lens.astype(np.int32),
            block_tables=self.block_table[rows, :width],
            query_lens=q_lens,
            seq_lens_host=seq_lens_host,
            max_query_len=max_q,
            max_seq_len=int(seq_lens.max()),
            sample_rows=sample_rows,
            sample_seqs=sample_seqs,
            # A row at a sequence's last token predicts no prompt token.
            prompt_lp=[] if max_q == 1 and sched.every_chunk_ends
            else _prompt_logprob_work(seqs, starts_l, q_lens, cu),
            window_slot_mapping=window_slots,
            window_block_tables=window_tables,
        )


def _verify_rows(
    seqs: list[Sequence], seq_lens: np.ndarray, cu: np.ndarray
) -> tuple[list[int], list[Sequence]]:
    """A speculative step's sample rows: a sequence with d drafts samples its last 1 + d
    rows (spec_decode/verify.py lays them out the same way), one without its last row,
    where its chunk reaches its end."""
    rows: list[int] = []
    sample_seqs: list[Sequence] = []
    for i, (s, n) in enumerate(zip(seqs, seq_lens.tolist())):
        d = len(s.spec_token_ids)
        if n != len(s.token_ids) + d:
            continue  # a prompt chunk short of its end
        end = int(cu[i + 1])
        rows.extend(range(end - 1 - d, end))
        sample_seqs.append(s)
    return rows, sample_seqs


def _prompt_logprob_work(
    seqs: list[Sequence], starts: list[int], q_lens: list[int], cu: np.ndarray
) -> list[tuple[Sequence, int, list[int]]]:
    """Rows at positions p < prompt_len - 1 of sequences that asked for prompt logprobs
    (row at position p predicts prompt token p + 1)."""
    out = []
    for i, (seq, start, n) in enumerate(zip(seqs, starts, q_lens)):
        if seq.params.prompt_logprobs is None or start >= seq.num_prompt_tokens - 1:
            continue
        if seq.index == 0:  # wants_prompt_logprobs, checked cheapest first
            row0 = int(cu[i])
            end = min(start + n, seq.num_prompt_tokens - 1)
            out.append((seq, start, list(range(row0, row0 + end - start))))
    return out
