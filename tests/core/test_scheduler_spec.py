"""The scheduler's drafts: 1 + len(drafts) tokens of budget and KV slots for a decoding
sequence, cut to the budget and max_tokens, dropped (never preempting) when blocks are short;
KVCacheManager.trim gives back the blocks of rejected drafts."""

from __future__ import annotations

from hybridllm.spec_decode.ngram_proposer import NgramProposer
from tests.core.helpers import BLOCK, add, make_scheduler

# After the prompt the sequence samples 1 (no earlier (8, 1): no drafts), then 2: its
# suffix (1, 2) occurred at the start, followed by 3, 4, 5, 6.
PROMPT = [1, 2, 3, 4, 5, 6, 7, 8, 9, 9, 9]


def _decoding(num_blocks: int = 64, k: int = 4):
    sched = make_scheduler(num_blocks=num_blocks)
    sched.proposer = NgramProposer(k, 2, 2)
    seq = add(sched, "a", PROMPT)
    seq.spec_enabled = True
    out = sched.schedule()  # the prompt: no drafts while prefilling
    assert out.num_new_tokens == [len(PROMPT)] and out.num_draft_tokens == 0
    seq.num_computed_tokens = len(PROMPT)
    seq.token_ids.append(1)  # the prompt's sampled token
    return sched, seq


def test_drafts_get_budget_and_slots() -> None:
    sched, seq = _decoding()
    # Tokens end with (9, 1), which did not occur before: a plain decode.
    out = sched.schedule()
    assert out.num_new_tokens == [1] and out.num_draft_tokens == 0 and seq.spec_token_ids == []
    seq.num_computed_tokens += 1
    seq.token_ids += [2]  # ends with (1, 2): followed by 3, 4, 5, 6 earlier
    out = sched.schedule()
    assert seq.spec_token_ids == [3, 4, 5, 6]
    assert out.num_new_tokens == [5] and out.num_draft_tokens == 4
    assert len(seq.block_table) * BLOCK >= seq.num_computed_tokens + 5


def test_drafts_cut_to_budget_and_max_tokens() -> None:
    sched, seq = _decoding()
    sched.config.max_num_batched_tokens = 3  # after the prompt: a budget of 3 tokens
    seq.num_computed_tokens += 1
    seq.token_ids += [2]
    out = sched.schedule()
    assert seq.spec_token_ids == [3, 4] and out.num_new_tokens == [3]
    seq.spec_token_ids = []
    sched2, seq2 = _decoding()
    seq2.num_computed_tokens += 1
    seq2.token_ids += [2]
    seq2.max_num_tokens = len(seq2.token_ids) + 2  # room for 2 more tokens: 1 draft + bonus
    out = sched2.schedule()
    assert seq2.spec_token_ids == [3] and out.num_new_tokens == [2]


def test_drafts_dropped_not_preempting_when_blocks_short() -> None:
    # 5 blocks of 4: the 11-token prompt takes 3, a second sequence 1; the decode at
    # position 12 takes the last one, and the 4 drafts (positions 13-16) find none.
    sched, seq = _decoding(num_blocks=5)
    other = add(sched, "b", [5, 5, 5])
    out = sched.schedule()
    assert other in out.seqs
    other.num_computed_tokens = 3
    other.token_ids.append(5)  # its sampled token: position 3, in its block
    seq.num_computed_tokens += 1
    seq.token_ids += [2]  # ends with (1, 2): drafts proposed, but no blocks for them
    assert sched.proposer.propose(seq.token_ids) == [3, 4, 5, 6]
    out = sched.schedule()
    assert sched.num_preemptions == 0
    assert seq.spec_token_ids == [] and out.num_draft_tokens == 0
    assert out.seqs == [seq, other]  # both still run, each one token


def test_trim_frees_blocks_past_the_tokens() -> None:
    sched, seq = _decoding()
    seq.num_computed_tokens += 1
    seq.token_ids += [2]
    sched.schedule()  # 12 computed + 5: blocks for 17 tokens
    assert len(seq.block_table) == 5
    free = sched.kv.num_free_blocks
    seq.num_computed_tokens = 13  # one draft accepted
    seq.token_ids += [3, 9]
    seq.spec_token_ids = []
    sched.kv.trim(seq)  # 14 tokens need 4 blocks
    assert len(seq.block_table) == 4 and sched.kv.num_free_blocks == free + 1
