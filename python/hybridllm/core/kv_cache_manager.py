"""Paged KV-cache blocks: per-sequence block tables, ref counts and prefix caching.

A full block's identity is a hash chained over all tokens up to its end, so equal prefixes
map to equal blocks. Freed blocks keep their hash and stay findable until reused; reuse takes
the least recently freed block first (LRU).

Sliding-window layers (WindowPool): their KV lives in a second, smaller pool. Each block of the
main pool (which the full-attention layers use) owns at most one window block, and a sequence
holds the window blocks only of its blocks that some future query of its can still see; when
it takes a new block, those wholly before its window are let go (freed, LRU, still owned, so
a prefix hit may take them back). seq.window_block_table is the windowed layers' block table
(a released block's entry goes stale: no kernel reads keys outside the window). A prefix hit
stops where the window blocks its first computed query needs are gone. Forked beams recompute
their partial block rather than copy it (a copy would need both pools' ids).
"""

from __future__ import annotations

import hashlib
from array import array
from collections import OrderedDict

from hybridllm.sequence import Sequence
from hybridllm.step_types import WindowPool


def chain_hash(parent: bytes, tokens: list[int]) -> bytes:
    return hashlib.sha256(parent + array("q", tokens).tobytes()).digest()


class KVCacheManager:
    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool,
                 window_pool: WindowPool | None = None) -> None:
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self.ref_counts = [0] * num_blocks
        self.block_hash: list[bytes | None] = [None] * num_blocks
        self.hash_to_block: dict[bytes, int] = {}
        # Free blocks in the order they are to be reused (front = least recently freed).
        self.free_blocks: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))
        self.prefix_queries = 0
        self.prefix_hits = 0
        self.window_pool = window_pool
        if window_pool is not None:
            n = window_pool.num_blocks
            self.window_of = [-1] * num_blocks  # main block -> its window block (-1: none)
            self.window_owner = [-1] * n  # window block -> the main block owning it
            self.window_refs = [0] * n
            self.free_window_blocks: OrderedDict[int, None] = OrderedDict.fromkeys(range(n))

    @property
    def num_free_blocks(self) -> int:
        return len(self.free_blocks)

    @property
    def usage(self) -> float:
        return 1.0 - self.num_free_blocks / self.num_blocks

    def blocks_needed(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def _update_hashes(self, seq: Sequence, num_tokens: int) -> None:
        """Extend seq.block_hashes over every full block within its first num_tokens tokens."""
        bs = self.block_size
        while (len(seq.block_hashes) + 1) * bs <= num_tokens:
            i = len(seq.block_hashes)
            # The first block's parent is the request's cache_salt (none: b""), so salted
            # prefixes are shared only within their salt.
            parent = seq.block_hashes[-1] if seq.block_hashes else seq.cache_salt
            seq.block_hashes.append(chain_hash(parent, seq.token_ids[i * bs : (i + 1) * bs]))

    def find_cached_prefix(self, seq: Sequence) -> list[int]:
        """Blocks holding the longest cached prefix of seq (leaving one token to compute)."""
        if not self.enable_prefix_caching or seq.wants_prompt_logprobs:
            return []
        limit = seq.num_tokens - 1  # the last token must run to produce logits
        self._update_hashes(seq, limit)
        hits: list[int] = []
        for h in seq.block_hashes[: limit // self.block_size]:
            block = self.hash_to_block.get(h)
            if block is None:
                break
            hits.append(block)
        if self.window_pool is not None:
            hits = self._windowed_hits(hits)
        self.prefix_queries += seq.num_tokens
        self.prefix_hits += len(hits) * self.block_size
        return hits

    def _window_start(self, first_query: int) -> int:
        """The first block a query at first_query (or later) can see in a windowed layer."""
        assert self.window_pool is not None
        return max(0, first_query - self.window_pool.window + 1) // self.block_size

    def _windowed_hits(self, hits: list[int]) -> list[int]:
        """The longest head of hits after which the window blocks the first computed query
        needs are all still owned."""
        window_of = self.window_of
        for k in range(len(hits), 0, -1):
            if all(window_of[b] >= 0 for b in hits[self._window_start(k * self.block_size):k]):
                return hits[:k]
        return []

    def allocate(self, seq: Sequence, num_new_tokens: int, cached: list[int] | None = None) -> bool:
        """Give seq the blocks for num_new_tokens more tokens; False (and no change) if short."""
        if not cached and (
            seq.num_computed_tokens + num_new_tokens <= len(seq.block_table) * self.block_size
        ):
            return True  # most decode steps: the last block still has room
        cached = cached or []
        total = seq.num_computed_tokens + len(cached) * self.block_size + num_new_tokens
        needed = self.blocks_needed(total) - len(seq.block_table) - len(cached)
        revived = sum(1 for b in cached if self.ref_counts[b] == 0)
        if needed + revived > self.num_free_blocks:
            return False
        if self.window_pool is not None and not self._allocate_window(seq, needed, cached):
            return False
        for block in cached:
            if self.ref_counts[block] == 0:
                del self.free_blocks[block]
            self.ref_counts[block] += 1
        seq.block_table.extend(cached)
        for _ in range(max(needed, 0)):
            block = self._take_free_block()
            seq.block_table.append(block)
            if self.window_pool is not None:
                seq.window_block_table.append(self._take_window_block(block))
        return True

    def _allocate_window(self, seq: Sequence, needed: int, cached: list[int]) -> bool:
        """Let go of seq's window blocks before its window, then take those of the cached
        blocks in the window (the new blocks' are taken with them); False if too few."""
        first_query = seq.num_computed_tokens + len(cached) * self.block_size
        start = self._window_start(first_query)
        self._release_window(seq, min(start, len(seq.block_table)))
        window_of, refs = self.window_of, self.window_refs
        in_window = cached[max(start - len(seq.block_table), 0):]
        revived = sum(1 for b in in_window if refs[window_of[b]] == 0)
        if max(needed, 0) + revived > len(self.free_window_blocks):
            return False
        if not seq.block_table:
            seq.window_start = start
        for block in cached:
            seq.window_block_table.append(max(window_of[block], 0))
        for block in in_window:
            w = window_of[block]
            if refs[w] == 0:
                del self.free_window_blocks[w]
            refs[w] += 1
        return True

    def _take_window_block(self, block: int) -> int:
        """A window block for the new main block `block`: its old one if it still owns one
        (free: the block was), else the least recently freed, taken from its owner."""
        w = self.window_of[block]
        if w < 0:
            w, _ = self.free_window_blocks.popitem(last=False)
            owner = self.window_owner[w]
            if owner >= 0:
                self.window_of[owner] = -1
            self.window_owner[w] = block
            self.window_of[block] = w
        else:
            del self.free_window_blocks[w]
        self.window_refs[w] = 1
        return w

    def _release_window(self, seq: Sequence, end: int) -> None:
        """seq no longer needs the window blocks of its blocks before `end`."""
        for i in range(seq.window_start, end):
            w = self.window_of[seq.block_table[i]]
            self.window_refs[w] -= 1
            if self.window_refs[w] == 0:
                self.free_window_blocks[w] = None
        seq.window_start = max(seq.window_start, end)

    @property
    def num_held_window_blocks(self) -> int:
        assert self.window_pool is not None
        return self.window_pool.num_blocks - len(self.free_window_blocks)

    def _take_free_block(self) -> int:
        """The least recently freed block, its stale prefix hash forgotten, ref count 1."""
        block, _ = self.free_blocks.popitem(last=False)
        stale = self.block_hash[block]
        if stale is not None and self.hash_to_block.get(stale) == block:
            del self.hash_to_block[stale]
        self.block_hash[block] = None
        self.ref_counts[block] = 1
        return block

    def cache_computed_blocks(self, seq: Sequence) -> None:
        """Publish the hashes of seq's blocks that are now full and computed."""
        full = seq.num_computed_tokens // self.block_size
        if not self.enable_prefix_caching or full <= seq.num_published_blocks:
            return
        self._update_hashes(seq, seq.num_computed_tokens)
        for i in range(seq.num_published_blocks, full):
            block = seq.block_table[i]
            if self.block_hash[block] is not None:
                continue
            h = seq.block_hashes[i]
            self.block_hash[block] = h
            self.hash_to_block.setdefault(h, block)
        seq.num_published_blocks = full

    def fork(self, parent: Sequence, child: Sequence) -> tuple[int, int] | None:
        """Give child (a beam forked from parent) parent's computed KV: the full blocks shared
        by reference count, the last partial block copied (copy on write). Returns the copy
        (src, dst) for the runner, or None; with no free block the partial block is left for
        the child to recompute."""
        bs = self.block_size
        full, rest = divmod(min(parent.num_computed_tokens, len(parent.block_table) * bs), bs)
        shared = parent.block_table[:full]
        for block in shared:
            self.ref_counts[block] += 1
        child.block_table = list(shared)
        child.block_hashes = parent.block_hashes[:full]
        child.num_published_blocks = min(parent.num_published_blocks, full)
        child.num_computed_tokens = full * bs
        child.num_cached_tokens = parent.num_cached_tokens
        child.ever_scheduled = True
        if self.window_pool is not None:
            child.window_block_table = parent.window_block_table[:full]
            child.window_start = min(parent.window_start, full)
            for block in shared[child.window_start:]:
                self.window_refs[self.window_of[block]] += 1
            return None  # a partial block is recomputed: copy_blocks knows one pool only
        if not rest or not self.free_blocks:
            return None
        block = self._take_free_block()
        child.block_table.append(block)
        child.num_computed_tokens += rest
        return parent.block_table[full], block

    def trim(self, seq: Sequence) -> None:
        """Free seq's blocks past those its tokens need (a verify step's rejected drafts had
        slots there). They were never full and computed, so never published."""
        keep = self.blocks_needed(seq.num_tokens)
        table = seq.block_table
        if self.window_pool is not None:  # their window blocks go with them, as in free()
            for block in reversed(table[max(keep, seq.window_start):]):
                w = self.window_of[block]
                self.window_refs[w] -= 1
                if self.window_refs[w] == 0:
                    self.free_window_blocks[w] = None
            del seq.window_block_table[keep:]
        for block in reversed(table[keep:]):
            self.ref_counts[block] -= 1
            if self.ref_counts[block] == 0:
                self.free_blocks[block] = None
        del table[keep:]

    def free(self, seq: Sequence) -> None:
        # Tail blocks first, so a prefix outlives its continuations in the LRU order.
        if self.window_pool is not None:
            for block in reversed(seq.block_table[seq.window_start:]):
                w = self.window_of[block]
                self.window_refs[w] -= 1
                if self.window_refs[w] == 0:
                    self.free_window_blocks[w] = None
            seq.window_block_table = []
            seq.window_start = 0
        for block in reversed(seq.block_table):
            self.ref_counts[block] -= 1
            if self.ref_counts[block] == 0:
                self.free_blocks[block] = None
        seq.block_table = []
        seq.num_published_blocks = 0
