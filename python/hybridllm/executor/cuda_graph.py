"""CUDA graphs for pure-decode steps (one query token per sequence), as vLLM / nano-vllm do.

At start-up one graph per batch size of a ladder is captured over static input buffers; a
decode step of n sequences is copied into the first n rows of those buffers and replays the
graph of the next captured size >= n. The padding rows are inert: slot -1 (no cache write),
seq_len 1 reading block 0 (any valid block: they only read, and their outputs are dropped).

The captured attention metadata holds no host value that changes between replays: num_seqs is
the graph's size, cu_seqlens_q is the constant 0..bs, and max_seqlen_k is fixed at
max_model_len, so the Triton backend plans the same split-KV partition count on every replay;
the kernels derive the actual partition lengths from the device seq_lens. Mixed and prefill
steps run eagerly.
"""

from __future__ import annotations

import bisect

import torch

from hybridllm.attention import AttentionBackend
from hybridllm.models.interfaces import CausalLM
from hybridllm.step_types import AttentionMetadata

MAX_CAPTURE_SIZE = 512


def capture_sizes(max_num_seqs: int, limit: int = MAX_CAPTURE_SIZE) -> list[int]:
    """1, 2, 4, 8, then every multiple of 8, up to min(max_num_seqs, limit), which is always
    included so that every decode batch the scheduler can form has a graph."""
    cap = max(1, min(max_num_seqs, limit))
    ladder = [1, 2, 4, *range(8, limit + 1, 8)]
    return sorted({s for s in ladder if s < cap} | {cap})


def padded_size(num_seqs: int, sizes: list[int]) -> int | None:
    """The smallest captured size >= num_seqs, or None when the batch is too large."""
    i = bisect.bisect_left(sizes, num_seqs)
    return sizes[i] if i < len(sizes) else None


class DecodeGraphs:
    """Static decode buffers, their per-size metadata, and (after capture()) the graphs.

    Without capture() (CPU tests, or before capture) run() executes the same padded forward
    over the same buffers eagerly, so the padding logic is testable without a GPU.
    """

    def __init__(
        self,
        model: CausalLM,
        backend: AttentionBackend,
        kv_caches: list[torch.Tensor],
        sizes: list[int],
        max_blocks_per_seq: int,
        max_seqlen_k: int,
    ) -> None:
        self.model = model
        self.backend = backend
        self.kv_caches = kv_caches
        self.sizes = sizes
        self.max_seqlen_k = max_seqlen_k
        dev = kv_caches[0].device
        max_bs = sizes[-1]
        i64, i32 = torch.int64, torch.int32
        # Stale values left in padding rows of ids / positions / block tables are harmless:
        # they are valid ids, positions and block numbers, and those rows' outputs are dropped.
        self.input_ids = torch.zeros(max_bs, dtype=i64, device=dev)
        self.positions = torch.zeros(max_bs, dtype=i64, device=dev)
        self.slot_mapping = torch.full((max_bs,), -1, dtype=i64, device=dev)
        self.seq_lens = torch.ones(max_bs, dtype=i32, device=dev)
        self.cu_seqlens_q = torch.arange(max_bs + 1, dtype=i32, device=dev)  # constant
        self.block_tables = torch.zeros(max_bs, max_blocks_per_seq, dtype=i32, device=dev)
        self.hidden = torch.zeros(
            max_bs, model.cfg.hidden_size, dtype=model.dtype, device=dev
        )
        self.metas = {bs: self._meta(bs) for bs in sizes}
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}

    def _meta(self, bs: int) -> AttentionMetadata:
        return AttentionMetadata(
            slot_mapping=self.slot_mapping[:bs],
            cu_seqlens_q=self.cu_seqlens_q[: bs + 1],
            seq_lens=self.seq_lens[:bs],
            block_tables=self.block_tables[:bs],
            max_seqlen_q=1,
            max_seqlen_k=self.max_seqlen_k,
            query_lens_host=[1] * bs,
            seq_lens_host=[self.max_seqlen_k] * bs,
        )

    def _forward(self, bs: int) -> None:
        self.hidden[:bs] = self.model(
            self.input_ids[:bs], self.positions[:bs], self.kv_caches, self.metas[bs],
            self.backend,
        )

    @torch.inference_mode()
    def capture(self) -> None:
        # Every slot is -1 here, so neither warm-up nor capture writes the KV cache.
        pool = None
        for bs in reversed(self.sizes):  # largest first: the smaller graphs reuse its pool
            self._forward(bs)  # warm-up outside capture: Triton compiles, cuBLAS plans
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool):
                self._forward(bs)
            pool = graph.pool()
            self.graphs[bs] = graph
        torch.cuda.synchronize()

    def can_run(self, meta: AttentionMetadata) -> bool:
        return meta.is_pure_decode and meta.num_seqs <= self.sizes[-1]

    def run(
        self, input_ids: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata
    ) -> torch.Tensor:
        """Hidden states [n, hidden] of a pure-decode batch (a view of the static output,
        valid until the next run)."""
        n = meta.num_seqs
        bs = padded_size(n, self.sizes)
        assert bs is not None and meta.is_pure_decode
        self.input_ids[:n].copy_(input_ids, non_blocking=True)
        self.positions[:n].copy_(positions, non_blocking=True)
        self.slot_mapping[:n].copy_(meta.slot_mapping, non_blocking=True)
        self.slot_mapping[n:bs].fill_(-1)
        self.seq_lens[:n].copy_(meta.seq_lens, non_blocking=True)
        self.seq_lens[n:bs].fill_(1)
        width = meta.block_tables.shape[1]
        self.block_tables[:n, :width].copy_(meta.block_tables, non_blocking=True)
        graph = self.graphs.get(bs)
        if graph is None:
            self._forward(bs)
        else:
            graph.replay()
        return self.hidden[:n]
