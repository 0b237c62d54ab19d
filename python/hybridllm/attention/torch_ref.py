"""Reference attention in plain torch: the CPU path, and the oracle for the Triton kernels.

`window` W (sliding-window layers): the query at position p sees keys p - W + 1 .. p only, the
W latest including its own (transformers' convention); None: every earlier key."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from hybridllm.kernels import cpu_paged_decode
from hybridllm.step_types import AttentionMetadata


def write_kv_reference(
    key: torch.Tensor,
    value: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> None:
    keep = slot_mapping >= 0
    if not bool(keep.all()):
        key, value, slot_mapping = key[keep], value[keep], slot_mapping[keep]
    num_kv_heads, head_dim = key_cache.shape[2], key_cache.shape[3]
    key_cache.view(-1, num_kv_heads, head_dim).index_copy_(0, slot_mapping, key)
    value_cache.view(-1, num_kv_heads, head_dim).index_copy_(0, slot_mapping, value)


def gather_kv(cache: torch.Tensor, block_tables: torch.Tensor, num_keys: int) -> torch.Tensor:
    """[B, max_blocks] block tables -> [B, num_keys, num_kv_heads, head_dim] contiguous keys."""
    block_size = cache.shape[1]
    num_blocks = (num_keys + block_size - 1) // block_size
    gathered = cache[block_tables[:, :num_blocks].long()]  # [B, nb, bs, H, D]
    b, nb, bs, h, d = gathered.shape
    return gathered.reshape(b, nb * bs, h, d)[:, :num_keys]


@dataclass
class _DecodePlan:
    """What every layer's decode attention needs; built once per step, not once per layer."""

    q_rows: torch.Tensor  # [b] flat query row of each single-token sequence
    tables: torch.Tensor  # [b, max_blocks] int32 block tables of those sequences
    lens: torch.Tensor  # [b] int32 their key counts
    blocks: torch.Tensor  # [b * nb] physical blocks to gather, nb = blocks of the longest
    num_blocks: int
    mask: torch.Tensor  # [b, 1, 1, nb * block_size] key position < seq_len
    windowed: dict[int, torch.Tensor] = field(default_factory=dict)  # mask per window

    def windowed_mask(self, window: int | None) -> torch.Tensor:
        """mask, less the keys before each sequence's last `window` (once per step)."""
        if window is None:
            return self.mask
        mask = self.windowed.get(window)
        if mask is None:
            pos = torch.arange(self.mask.shape[-1], device=self.mask.device)
            recent = pos[None, :] >= (self.lens[:, None] - window)
            mask = self.windowed[window] = self.mask & recent[:, None, None, :]
        return mask


def _split_batch(
    meta: AttentionMetadata,
) -> tuple[list[tuple[int, int, int]], list[tuple[int, int, int, int]]]:
    decode, prefill = [], []
    start = 0
    for i, (q_len, k_len) in enumerate(zip(meta.query_lens_host, meta.seq_lens_host)):
        if q_len == 1:
            decode.append((i, start, k_len))
        elif q_len > 0:
            prefill.append((i, start, q_len, k_len))
        start += q_len
    return decode, prefill


def _decode_plan(
    meta: AttentionMetadata, rows: list[tuple[int, int, int]], block_size: int, device: torch.device
) -> _DecodePlan:
    max_len = max(r[2] for r in rows)
    nb = -(-max_len // block_size)
    seq_idx = torch.tensor([r[0] for r in rows], device=device)
    lens = torch.tensor([r[2] for r in rows], device=device)
    tables = meta.block_tables.index_select(0, seq_idx)
    blocks = tables[:, :nb].reshape(-1).long()
    mask = torch.arange(nb * block_size, device=device)[None, :] < lens[:, None]
    return _DecodePlan(
        q_rows=torch.tensor([r[1] for r in rows], device=device),
        tables=tables,
        lens=lens.to(torch.int32),
        blocks=blocks,
        num_blocks=nb,
        mask=mask[:, None, None, :],
    )


class TorchAttentionBackend:
    """On CPU in fp32 or bf16, the C++ paged kernels: decode rows and prompt rows each in one
    call. Elsewhere decode rows batched over keys gathered into reused buffers, and prompt rows
    one sequence at a time.

    The gather goes into buffers kept across layers and steps: on CPU a fresh multi-megabyte
    tensor per layer costs more in page faults than the copy itself.
    """

    name = "torch"

    def __init__(self, use_kernel: bool = True) -> None:
        self._buffers: dict[str, torch.Tensor] = {}
        self.use_kernel = use_kernel
        # The step's slot mapping (every layer gets the same tensor) and whether all its
        # slots are real, so that check (a reduction and a host sync) runs once per step.
        self._slots: torch.Tensor | None = None
        self._all_slots_valid = False

    def _use_kernel(self, q: torch.Tensor, cache: torch.Tensor) -> bool:
        """The C++ decode kernel where it applies (fp32 or bf16 on CPU) and could be built."""
        return (
            self.use_kernel
            and q.device.type == "cpu"
            and q.dtype == cache.dtype
            and q.dtype in (torch.float32, torch.bfloat16)
            and cpu_paged_decode.load() is not None
        )

    def write_kv(
        self,
        key: torch.Tensor,
        value: torch.Tensor,
        key_cache: torch.Tensor,
        value_cache: torch.Tensor,
        slot_mapping: torch.Tensor,
    ) -> None:
        if self._use_kernel(key, key_cache):
            cpu_paged_decode.write_kv(key, value, key_cache, value_cache, slot_mapping)
            return
        if slot_mapping is not self._slots:
            self._slots, self._all_slots_valid = slot_mapping, bool((slot_mapping >= 0).all())
        if not self._all_slots_valid:
            write_kv_reference(key, value, key_cache, value_cache, slot_mapping)
            return
        num_kv_heads, head_dim = key_cache.shape[2], key_cache.shape[3]
        key_cache.view(-1, num_kv_heads, head_dim).index_copy_(0, slot_mapping, key)
        value_cache.view(-1, num_kv_heads, head_dim).index_copy_(0, slot_mapping, value)

    def forward(
        self,
        query: torch.Tensor,
        key_cache: torch.Tensor,
        value_cache: torch.Tensor,
        meta: AttentionMetadata,
        scale: float,
        key: torch.Tensor | None = None,
        value: torch.Tensor | None = None,
        window: int | None = None,
    ) -> torch.Tensor:
        decode, prefill = self._split_for(meta)
        kernel = self._use_kernel(query, key_cache)
        if decode and not prefill and kernel:
            # Every row decodes, in sequence order: the kernel's output is the whole answer.
            plan = self._plan_for(meta, decode, key_cache)
            return cpu_paged_decode.paged_decode(
                query, key_cache, value_cache, plan.tables, plan.lens, scale, window
            )
        out = torch.empty(query.shape, dtype=query.dtype, device=query.device)
        if decode:
            plan = self._plan_for(meta, decode, key_cache)
            q = query.index_select(0, plan.q_rows)
            if kernel:
                o = cpu_paged_decode.paged_decode(
                    q, key_cache, value_cache, plan.tables, plan.lens, scale, window
                )
            else:
                k = self._gather("k", key_cache, plan)
                v = self._gather("v", value_cache, plan)
                o = F.scaled_dot_product_attention(
                    q.unsqueeze(2), k, v, attn_mask=plan.windowed_mask(window), scale=scale,
                    enable_gqa=True,
                ).squeeze(2)  # q as [b, H, 1, D]
            out.index_copy_(0, plan.q_rows, o)
        if prefill and kernel:
            # Every prompt row of the step in one call, keys read from the cache (this step's
            # were written there first).
            seqs = meta.backend_state.get("torch_prefill_seqs")
            if seqs is None:
                seqs = meta.backend_state["torch_prefill_seqs"] = torch.tensor(prefill)
            cpu_paged_decode.paged_prefill(
                query, key_cache, value_cache, meta.block_tables, seqs, scale, window, out
            )
            return out
        for i, start, q_len, k_len in prefill:
            rows = slice(start, start + q_len)
            if key is not None and value is not None and q_len == k_len and (
                window is None or window >= k_len
            ):
                # A whole prompt at once: its keys are exactly this step's, no gather or mask.
                o = F.scaled_dot_product_attention(
                    query[rows].transpose(0, 1),
                    key[rows].transpose(0, 1),
                    value[rows].transpose(0, 1),
                    is_causal=True,
                    scale=scale,
                    enable_gqa=True,
                )
                out[rows] = o.transpose(0, 1)
            else:
                out[rows] = _prefill_one(
                    query[rows], key_cache, value_cache, meta, i, k_len, scale, window
                )
        return out

    def _split_for(
        self, meta: AttentionMetadata
    ) -> tuple[list[tuple[int, int, int]], list[tuple[int, int, int, int]]]:
        """_split_batch once per step (a Python loop over the batch), not once per layer."""
        split = meta.backend_state.get("torch_split")
        if split is None:
            split = meta.backend_state["torch_split"] = _split_batch(meta)
        return split

    def _plan_for(
        self, meta: AttentionMetadata, rows: list[tuple[int, int, int]], cache: torch.Tensor
    ) -> _DecodePlan:
        plan = meta.backend_state.get("torch_decode_plan")
        if plan is None:
            plan = _decode_plan(meta, rows, cache.shape[1], cache.device)
            meta.backend_state["torch_decode_plan"] = plan
        return plan

    def _gather(self, name: str, cache: torch.Tensor, plan: _DecodePlan) -> torch.Tensor:
        """[b, Hkv, L, D] keys (a strided view over a reused buffer)."""
        num_blocks, block_size, heads, dim = cache.shape
        n = plan.blocks.numel()
        buf = self._buffers.get(name)
        if buf is None or buf.numel() < n * block_size * heads * dim or buf.dtype != cache.dtype:
            buf = torch.empty(
                n * block_size * heads * dim * 2, dtype=cache.dtype, device=cache.device
            )
            self._buffers[name] = buf
        flat = buf[: n * block_size * heads * dim].view(n, block_size * heads * dim)
        torch.index_select(cache.view(num_blocks, -1), 0, plan.blocks, out=flat)
        b = n // plan.num_blocks
        return flat.view(b, plan.num_blocks * block_size, heads, dim).transpose(1, 2)


def _prefill_one(
    q: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    meta: AttentionMetadata,
    i: int,
    k_len: int,
    scale: float,
    window: int | None = None,
) -> torch.Tensor:
    """Causal attention of one sequence's query rows (the last q_len of its k_len keys)."""
    q_len = q.shape[0]
    # Keys older than every row's window are not read at all.
    first = 0 if window is None else max(0, k_len - q_len - window + 1)
    k = gather_kv(key_cache, meta.block_tables[i : i + 1], k_len)[0, first:].transpose(0, 1)
    v = gather_kv(value_cache, meta.block_tables[i : i + 1], k_len)[0, first:].transpose(0, 1)
    # Row r (position k_len - q_len + r) sees key c (position first + c) when c - r lies in
    # (k_len - q_len - first - window, k_len - q_len - first].
    diag = k_len - q_len - first
    mask = torch.ones(q_len, k_len - first, dtype=torch.bool, device=q.device).tril(diag)
    if window is not None:
        mask = mask.triu(diag - window + 1)
    o = F.scaled_dot_product_attention(
        q.transpose(0, 1), k, v, attn_mask=mask, scale=scale, enable_gqa=True
    )
    return o.transpose(0, 1)


def paged_attention_reference(
    query: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    meta: AttentionMetadata,
    scale: float,
    window: int | None = None,
) -> torch.Tensor:
    """Causal attention of each sequence's query rows over its cached keys (GQA by grouping)."""
    return TorchAttentionBackend(use_kernel=False).forward(
        query, key_cache, value_cache, meta, scale, window=window
    )
