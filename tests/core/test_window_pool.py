"""The sliding-window layers' own KV pool (KVCacheManager with a WindowPool): a sequence
holds window blocks only for the blocks its next query can still see; a 4,096-token Gemma 3
sequence (window 512, block 16) holds all 256 main blocks but 33 window blocks."""

from __future__ import annotations

from hybridllm.core.kv_cache_manager import KVCacheManager
from hybridllm.step_types import WindowPool
from tests.core.helpers import make_seq

BS = 16
WINDOW = 512


def _grow(kv: KVCacheManager, seq, n: int) -> None:
    """Allocate and compute n more tokens of seq (as the engine would after a step)."""
    assert kv.allocate(seq, n)
    seq.num_computed_tokens += n


def test_gemma3_4096_tokens_hold_the_window() -> None:
    pool = WindowPool(WINDOW, 300, layers=(0,))
    kv = KVCacheManager(300, BS, False, pool)
    seq = make_seq(range(4096 + 1))
    _grow(kv, seq, 4096)  # the prompt in one step: every block's window part is written
    assert kv.num_free_blocks == 300 - 256
    # The first decode token takes block 256 and lets go of those before its window:
    # keys 3585..4096 are blocks 224..256.
    _grow(kv, seq, 1)
    assert len(seq.block_table) == len(seq.window_block_table) == 257
    assert kv.num_held_window_blocks == 257 - (4096 - WINDOW + 1) // BS == 33
    # Without the pool the windowed layers would hold all 257 blocks.
    kv.free(seq)
    assert kv.num_held_window_blocks == 0 and kv.num_free_blocks == 300


def test_chunked_prefill_slides_and_window_blocks_are_recycled() -> None:
    pool = WindowPool(WINDOW, 49, layers=(0,))
    kv = KVCacheManager(400, BS, False, pool)
    seq = make_seq(range(4096))
    for _ in range(4096 // 256):
        _grow(kv, seq, 256)
        # the window (32 blocks + a partial one) and one 256-token chunk (16 blocks)
        assert kv.num_held_window_blocks <= 32 + 1 + 16
    assert len(set(seq.window_block_table[-32:])) == 32


def test_prefix_hit_stops_where_window_blocks_are_gone() -> None:
    pool = WindowPool(2 * BS, 8, layers=(0,))
    kv = KVCacheManager(64, BS, True, pool)
    first = make_seq(range(10 * BS + 1), rid="a")
    for _ in range(10):
        _grow(kv, first, BS)
        kv.cache_computed_blocks(first)
    kv.free(first)
    # All ten main blocks are cached; only the window blocks of the last few survive in
    # the 8-block pool, so a hit covers at most the blocks whose windows are owned.
    again = make_seq(range(10 * BS + 1), rid="b")
    hits = kv.find_cached_prefix(again)
    assert 0 < len(hits) <= 10
    start = max(0, len(hits) * BS - 2 * BS + 1) // BS
    assert all(kv.window_of[b] >= 0 for b in hits[start:])
    assert kv.allocate(again, 10 * BS + 1 - len(hits) * BS, hits)
    assert kv.num_held_window_blocks <= 8


def test_fork_shares_window_blocks_and_recomputes_the_partial_one() -> None:
    pool = WindowPool(2 * BS, 16, layers=(0,))
    kv = KVCacheManager(32, BS, False, pool)
    parent = make_seq(range(5 * BS + 3), rid="p")
    _grow(kv, parent, 5 * BS + 3)
    _grow(kv, parent, 0)
    child = make_seq(range(5 * BS + 3), rid="c")
    assert kv.fork(parent, child) is None  # no copy: the child recomputes its 3 tokens
    assert child.num_computed_tokens == 5 * BS
    assert child.block_table == parent.block_table[:5]
    assert child.window_block_table == parent.window_block_table[:5]
    held = kv.num_held_window_blocks
    _grow(kv, child, 3)
    assert kv.num_held_window_blocks == held + 1  # only its own last block is new
    kv.free(parent)
    kv.free(child)
    assert kv.num_held_window_blocks == 0 and kv.num_free_blocks == 32


def test_rejected_drafts_give_back_their_window_blocks() -> None:
    """A verify step's slots past a block boundary take a main and a window block; when its
    drafts are rejected, trim() gives back both (as free() would)."""
    pool = WindowPool(2 * BS, 8, layers=(0,))
    kv = KVCacheManager(16, BS, False, pool)
    seq = make_seq(range(3 * BS - 2))
    _grow(kv, seq, 3 * BS - 3)  # the prompt less its last token: 3 blocks
    held = kv.num_held_window_blocks
    assert kv.allocate(seq, 1 + 4)  # the last token and 4 drafts reach into block 3
    assert len(seq.block_table) == len(seq.window_block_table) == 4
    assert kv.num_held_window_blocks == held + 1
    seq.num_computed_tokens += 1
    seq.token_ids.append(99)  # none accepted: the bonus token only
    kv.trim(seq)
    assert len(seq.block_table) == len(seq.window_block_table) == 3
    assert kv.num_held_window_blocks == held and kv.num_free_blocks == 16 - 3
    kv.free(seq)
    assert kv.num_held_window_blocks == 0 and kv.num_free_blocks == 16
