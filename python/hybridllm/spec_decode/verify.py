"""Verifying drafts: one sampled row per draft position, then the longest agreeing run.

A sequence with d drafts is computed as 1 + d query tokens (its last token and the drafts);
row j's logits give the token after draft j - 1. Row j is sampled as the sequence would be
with drafts[:j] accepted (a view whose tokens end with them: penalties, min_tokens and
bad_words see exactly the tokens before position j), with the sequence's own sampler,
generator and logits processors. The drafts are accepted while row j's token equals
drafts[j]; the first row that differs, or the row after the last draft, gives the bonus token.

For greedy rows this is vLLM's rule (draft == argmax). For random rows it is rejection sampling
against a deterministic proposal: with q one-hot at the draft d, accepting with probability
min(1, p(d) / q(d)) = p(d) and resampling from (p - q)+ renormalised (p with d removed) emits
exactly a draw x ~ p, d when x = d. So the emitted tokens have the target distribution
(tests/engine/test_spec_decode.py checks it with a chi-square test).
"""

from __future__ import annotations

import copy

from hybridllm.sequence import Sequence


def draft_rows(seqs: list[Sequence]) -> list[Sequence]:
    """One entry per sampled row: a sequence without drafts is its own row; one with d drafts
    gives 1 + d rows, row j a view of it whose token ids end with drafts[:j]."""
    rows: list[Sequence] = []
    for seq in seqs:
        rows.append(seq)
        drafts = seq.spec_token_ids
        for j in range(1, len(drafts) + 1):
            view = copy.copy(seq)
            view.token_ids = seq.token_ids + drafts[:j]
            rows.append(view)
    return rows


def num_emitted(sampled: list[int], first: int, drafts: list[int]) -> int:
    """The tokens a sequence emits from its rows first..first+len(drafts): its accepted drafts
    plus the bonus token."""
    m = 0
    for d in drafts:
        if sampled[first + m] != d:
            break
        m += 1
    return m + 1


def emitted_rows(seqs: list[Sequence], sampled: list[int]) -> list[tuple[int, int]]:
    """(first row, tokens emitted) of each sequence, its rows as draft_rows laid them out;
    the emitted tokens are sampled[first:first + emitted]."""
    out: list[tuple[int, int]] = []
    row = 0
    for seq in seqs:
        drafts = seq.spec_token_ids
        out.append((row, num_emitted(sampled, row, drafts) if drafts else 1))
        row += 1 + len(drafts)
    return out
