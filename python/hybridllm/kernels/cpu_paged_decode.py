"""The CPU paged attention kernels (csrc/paged_decode_cpu.cpp), built on first use: decode (one
query row per sequence), prefill (many rows of a sequence, a prompt or a chunk of one), and
the write of a step's keys and values into the cache.

Compiled once with torch's C++ extension tooling into a cache folder; where no compiler is
available the torch backend keeps its gather-based path (same results, slower).
"""

from __future__ import annotations

from functools import lru_cache
from types import ModuleType

import torch

from hybridllm.kernels.cpu_build import FAST_MATH, build


@lru_cache(maxsize=1)
def load() -> ModuleType | None:
    return build("hybridllm_paged_decode_cpu", "paged_decode_cpu.cpp", FAST_MATH)


def paged_decode(
    query: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
    window: int | None = None,
) -> torch.Tensor:
    """query [b, H, D]; caches [blocks, block_size, Hkv, D]; block_tables [b, n] int32;
    window: each query sees its sequence's last `window` keys only (None: all)."""
    module = load()
    assert module is not None
    return module.paged_decode(
        query, key_cache, value_cache, block_tables, seq_lens, scale, window or 0
    )


def write_kv(
    key: torch.Tensor,
    value: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> None:
    """key, value [T, Hkv, D] into the caches [blocks, block_size, Hkv, D] at the flat slots
    [T] int64 (block * block_size + offset); rows with a negative slot are skipped."""
    module = load()
    assert module is not None
    module.write_kv(key, value, key_cache, value_cache, slot_mapping)


def paged_prefill(
    query: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seqs: torch.Tensor,
    scale: float,
    window: int | None,
    out: torch.Tensor,
) -> None:
    """Causal attention over the cache (this step's keys already written) for the query rows
    of each sequence in seqs [P, 4] int64: (block-table row, first query row, query rows,
    keys); writes those rows of out [T, H, D]. query [T, H, D], last dim contiguous."""
    module = load()
    assert module is not None
    module.paged_prefill(
        query, key_cache, value_cache, block_tables, seqs, scale, window or 0, out
    )
