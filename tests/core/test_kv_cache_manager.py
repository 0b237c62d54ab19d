"""KVCacheManager: block counts, ref counts, chained prefix hashes, LRU reuse, exhaustion.

Block size 4 throughout. `prefill` admits a sequence as the scheduler does (prefix hits
first) and computes its whole prompt, publishing its full blocks.
"""

from __future__ import annotations

from hybridllm.core.kv_cache_manager import KVCacheManager, chain_hash
from tests.core.helpers import BLOCK, make_seq, prefill


def test_allocate_counts_blocks_and_usage() -> None:
    """Blocks are taken only when the last one is full; usage and the free count follow."""
    kv = KVCacheManager(8, BLOCK, enable_prefix_caching=False)
    seq = make_seq(range(10))
    assert kv.blocks_needed(10) == 3 and kv.blocks_needed(12) == 3 and kv.blocks_needed(13) == 4
    assert kv.allocate(seq, 10)
    assert seq.block_table == [0, 1, 2] and kv.ref_counts == [1, 1, 1, 0, 0, 0, 0, 0]
    assert kv.num_free_blocks == 5 and kv.usage == 3 / 8
    seq.num_computed_tokens = 10
    assert kv.allocate(seq, 2) and seq.block_table == [0, 1, 2]  # 12 tokens fit in 3
    seq.num_computed_tokens = 12
    assert kv.allocate(seq, 5) and seq.block_table == [0, 1, 2, 3, 4]  # 17 tokens: 5 blocks
    assert kv.num_free_blocks == 3 and kv.usage == 5 / 8
    kv.free(seq)
    assert seq.block_table == [] and kv.ref_counts == [0] * 8
    assert kv.num_free_blocks == 8 and kv.usage == 0.0


def test_shared_blocks_are_ref_counted() -> None:
    """A prefix hit shares blocks (ref count 2); each holder's free releases one count."""
    kv = KVCacheManager(8, BLOCK, enable_prefix_caching=True)
    a, b = make_seq(range(9)), make_seq(range(9))
    assert prefill(kv, a) and a.block_table == [0, 1, 2]
    assert prefill(kv, b) and b.block_table == [0, 1, 3]  # 8 cached tokens, 1 computed
    assert kv.ref_counts == [2, 2, 1, 1, 0, 0, 0, 0]
    assert kv.num_free_blocks == 4 and kv.usage == 0.5
    assert (kv.prefix_queries, kv.prefix_hits) == (18, 8)
    kv.free(a)
    assert kv.ref_counts == [1, 1, 0, 1, 0, 0, 0, 0]
    assert list(kv.free_blocks) == [4, 5, 6, 7, 2] and kv.num_free_blocks == 5
    kv.free(b)
    assert kv.ref_counts == [0] * 8 and kv.num_free_blocks == 8
    assert list(kv.free_blocks) == [4, 5, 6, 7, 2, 3, 1, 0]


def test_block_hashes_are_chained() -> None:
    """Equal prefixes give equal hashes; a change in block 0 changes every later hash even
    where the later blocks' tokens are equal; a hash depends on the blocks before it."""
    kv = KVCacheManager(16, BLOCK, enable_prefix_caching=True)
    tokens = list(range(1, 13))
    a = make_seq(tokens)
    b = make_seq([1, 99, *tokens[2:]])  # differs in block 0 only
    c = make_seq([*tokens[:8], 7, 7, 7, 7])  # differs in block 2 only
    for seq in (a, b, c):
        assert prefill(kv, seq)
    h0 = chain_hash(b"", tokens[0:4])
    h1 = chain_hash(h0, tokens[4:8])
    assert a.block_hashes == [h0, h1, chain_hash(h1, tokens[8:12])]
    assert c.block_hashes[:2] == a.block_hashes[:2] and c.block_hashes[2] != a.block_hashes[2]
    assert all(hb != ha for hb, ha in zip(b.block_hashes, a.block_hashes))
    assert chain_hash(b"", tokens[4:8]) != h1  # same tokens, other position
    assert c.block_table[:2] == a.block_table[:2] == [0, 1]
    assert b.block_table == [3, 4, 5]
    assert {h: kv.hash_to_block[h] for h in a.block_hashes} == dict(zip(a.block_hashes, [0, 1, 2]))


def test_partial_blocks_are_not_published() -> None:
    """Only full computed blocks get a hash; the last block is published once it fills."""
    kv = KVCacheManager(8, BLOCK, enable_prefix_caching=True)
    seq = make_seq(range(10))
    assert prefill(kv, seq)
    assert len(seq.block_hashes) == 2 and seq.num_published_blocks == 2
    assert kv.block_hash[seq.block_table[2]] is None and len(kv.hash_to_block) == 2
    for token in (100, 101):  # two decode steps fill block 2
        seq.token_ids.append(token)
        assert kv.allocate(seq, 1)
        seq.num_computed_tokens += 1
        kv.cache_computed_blocks(seq)
    assert seq.num_published_blocks == 3 and len(kv.hash_to_block) == 3
    assert kv.block_hash[seq.block_table[2]] == chain_hash(seq.block_hashes[1], [8, 9, 100, 101])
    assert kv.find_cached_prefix(make_seq(range(8))) == [0]  # last token left to compute
    assert kv.find_cached_prefix(make_seq(range(9))) == [0, 1]


def test_freed_blocks_stay_findable_until_reused() -> None:
    """A finished sequence's blocks are free but still hit; the hit revives them."""
    kv = KVCacheManager(4, BLOCK, enable_prefix_caching=True)
    a = make_seq(range(9))
    assert prefill(kv, a)
    kv.free(a)
    assert kv.num_free_blocks == 4 and list(kv.free_blocks) == [3, 2, 1, 0]
    b = make_seq(range(9))
    assert kv.find_cached_prefix(b) == [0, 1]
    assert prefill(kv, b) and b.block_table == [0, 1, 3]
    assert kv.ref_counts == [1, 1, 0, 1] and list(kv.free_blocks) == [2]


def test_reuse_takes_least_recently_freed_first() -> None:
    """Blocks freed earlier are reused earlier: the older prefix goes, the newer one stays."""
    kv = KVCacheManager(4, BLOCK, enable_prefix_caching=True)
    a, b = make_seq(range(8)), make_seq(range(100, 108))
    assert prefill(kv, a) and prefill(kv, b)
    kv.free(a)
    kv.free(b)
    assert list(kv.free_blocks) == [1, 0, 3, 2]
    x = make_seq(range(200, 208))
    assert prefill(kv, x) and x.block_table == [1, 0]
    assert kv.find_cached_prefix(make_seq(range(9))) == []
    assert kv.find_cached_prefix(make_seq(range(100, 109))) == [2, 3]


def test_prefix_outlives_its_continuations() -> None:
    """A freed sequence loses its blocks tail first, so its prefix stays cached longest."""
    kv = KVCacheManager(3, BLOCK, enable_prefix_caching=True)
    a = make_seq(range(12))
    assert prefill(kv, a) and a.block_table == [0, 1, 2]
    kv.free(a)

    def hits() -> list[int]:
        return kv.find_cached_prefix(make_seq(range(13)))

    assert hits() == [0, 1, 2]
    taken = []
    for token in (500, 501):
        seq = make_seq([token])
        assert prefill(kv, seq)
        taken += seq.block_table
        assert hits() == [0, 1, 2][: 3 - len(taken)]
    assert taken == [2, 1]


def test_reused_block_forgets_its_stale_hash() -> None:
    """Reusing a cached block unpublishes its old hash; its new content is published anew."""
    kv = KVCacheManager(2, BLOCK, enable_prefix_caching=True)
    a = make_seq(range(8))
    assert prefill(kv, a)
    old0, old1 = a.block_hashes
    kv.free(a)
    x = make_seq([9, 9, 9, 9])
    assert kv.allocate(x, 4) and x.block_table == [1]
    assert kv.block_hash[1] is None and old1 not in kv.hash_to_block
    assert kv.hash_to_block == {old0: 0}
    x.num_computed_tokens = 4
    kv.cache_computed_blocks(x)
    assert kv.block_hash[1] == x.block_hashes[0] == chain_hash(b"", [9, 9, 9, 9])
    assert kv.hash_to_block == {old0: 0, x.block_hashes[0]: 1}
    assert kv.find_cached_prefix(make_seq(range(9))) == [0]


def test_reusing_a_duplicate_keeps_the_published_block() -> None:
    """Two equal blocks computed in one step: the first is published; reusing the second
    must not unpublish the first."""
    kv = KVCacheManager(4, BLOCK, enable_prefix_caching=True)
    a, b = make_seq(range(5)), make_seq(range(5))
    assert kv.allocate(a, 5) and kv.allocate(b, 5)
    for seq in (a, b):
        seq.num_computed_tokens = 5
        kv.cache_computed_blocks(seq)
    h0 = a.block_hashes[0]
    assert kv.hash_to_block == {h0: 0} and kv.block_hash[2] == h0
    kv.free(b)
    x = make_seq(range(100, 108))
    assert prefill(kv, x) and x.block_table == [3, 2]
    assert kv.hash_to_block[h0] == 0
    assert kv.find_cached_prefix(make_seq(range(5))) == [0]


def test_allocate_fails_without_changing_anything() -> None:
    """Short of free blocks, allocate returns False and leaves every table and count as is."""
    kv = KVCacheManager(4, BLOCK, enable_prefix_caching=False)
    a, b = make_seq(range(12)), make_seq(range(8))
    assert kv.allocate(a, 12) and a.block_table == [0, 1, 2]
    assert not kv.allocate(b, 8)
    assert b.block_table == [] and kv.ref_counts == [1, 1, 1, 0] and list(kv.free_blocks) == [3]
    assert kv.allocate(b, 4) and b.block_table == [3]
    a.num_computed_tokens = 12
    assert not kv.allocate(a, 1)
    assert a.block_table == [0, 1, 2] and kv.num_free_blocks == 0
    kv.free(b)
    assert kv.allocate(a, 1) and a.block_table == [0, 1, 2, 3]


def test_revived_hits_need_free_blocks_held_hits_do_not() -> None:
    """Hits on free cached blocks count against the free blocks; hits on held ones don't."""
    kv = KVCacheManager(4, BLOCK, enable_prefix_caching=True)
    a = make_seq(range(9))
    assert prefill(kv, a)
    kv.free(a)
    z = make_seq(range(100, 108))
    assert kv.allocate(z, 8) and z.block_table == [3, 2]
    b = make_seq(range(9))
    cached = kv.find_cached_prefix(b)
    assert cached == [0, 1] and kv.num_free_blocks == 2
    assert not kv.allocate(b, 1, cached)  # 2 revived + 1 new > 2 free
    assert b.block_table == [] and kv.ref_counts == [0, 0, 1, 1]
    assert list(kv.free_blocks) == [1, 0] and kv.find_cached_prefix(b) == [0, 1]

    held = KVCacheManager(4, BLOCK, enable_prefix_caching=True)
    assert prefill(held, make_seq(range(9)))
    c = make_seq(range(9))
    assert held.num_free_blocks == 1
    assert held.allocate(c, 1, held.find_cached_prefix(c)) and c.block_table == [0, 1, 3]
    assert held.ref_counts == [2, 2, 1, 1] and held.num_free_blocks == 0
    d = make_seq(range(9))
    assert not held.allocate(d, 1, held.find_cached_prefix(d))
    assert d.block_table == [] and held.ref_counts == [2, 2, 1, 1]


def test_no_lookup_without_caching_or_with_prompt_logprobs() -> None:
    """Caching off publishes nothing; a prompt_logprobs request never takes a hit."""
    off = KVCacheManager(8, BLOCK, enable_prefix_caching=False)
    a = make_seq(range(9))
    assert prefill(off, a)
    assert off.hash_to_block == {} and off.block_hash == [None] * 8 and a.block_hashes == []
    assert off.find_cached_prefix(make_seq(range(9))) == []
    on = KVCacheManager(8, BLOCK, enable_prefix_caching=True)
    assert prefill(on, make_seq(range(9)))
    assert on.find_cached_prefix(make_seq(range(9), prompt_logprobs=1)) == []
    assert on.find_cached_prefix(make_seq(range(9))) == [0, 1]
