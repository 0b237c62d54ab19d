"""Bidirectional attention over a packed batch of whole sequences (encoder models, no cache).

Sequence i's rows cu_seqlens[i]:cu_seqlens[i+1] attend to each other only. Two layouts:

- grouped by length (CPU): the sequences of one length go through one
  scaled_dot_product_attention call as a dense [n, heads, len, dim] batch, so no row is padded
  and no mask is needed (values equal to one call per sequence); a length held by one
  sequence is a call on its own rows. Calls cost a fixed overhead each, and a step of inputs
  queued longest first (engine/pooling_engine.py) holds runs of equal lengths. On the bench's
  2,000 sentences' steps, attention alone (one layer x 6, 2 threads): 3.3 s one call per
  sequence, 2.4 s one call per length; padding near-equal lengths into one call with a key
  mask was slower (3.0 s at <= 10% padding, 3.5 s one call a step): the masked scores cost
  more than the calls saved.
- padded: the sequences scattered into [B, max_len] with a key-padding mask, one call. On
  CUDA one launch beats B small ones; the padded rows cost little there.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch
import torch.nn.functional as F

from hybridllm.step_types import EncoderMetadata


def encoder_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, meta: EncoderMetadata, scale: float
) -> torch.Tensor:
    """q, k, v: [T, heads, head_dim] -> [T, heads, head_dim]."""
    if q.device.type == "cpu":
        return grouped_attention(q, k, v, meta, scale)
    return padded_attention(q, k, v, meta, scale)


# One group: (length, first row, number of sequences) when its sequences are adjacent rows,
# else (length, row index of every token of the group [n * length], number of sequences).
_Group = tuple[int, "int | torch.Tensor", int]


def _length_groups(meta: EncoderMetadata) -> list[_Group]:
    """The step's sequences grouped by length, made once per step (every layer reuses it)."""
    groups = meta.backend_state.get("groups")
    if groups is not None:
        return groups
    by_len: dict[int, list[int]] = {}
    for i, n in enumerate(meta.seq_lens_host):
        by_len.setdefault(n, []).append(i)
    cu = meta.cu_seqlens_host
    groups = []
    for n, seqs in by_len.items():
        if seqs[-1] - seqs[0] == len(seqs) - 1:  # adjacent: a view, no gather
            groups.append((n, cu[seqs[0]], len(seqs)))
        else:
            starts = torch.tensor([cu[i] for i in seqs])
            rows = (starts[:, None] + torch.arange(n)[None, :]).reshape(-1)
            groups.append((n, rows, len(seqs)))
    meta.backend_state["groups"] = groups
    return groups


def grouped_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, meta: EncoderMetadata, scale: float
) -> torch.Tensor:
    out = torch.empty_like(q)
    shares = _shares(meta)
    if len(shares) == 1 or (torch.is_grad_enabled() and q.requires_grad):
        # One thread, or autograd recording: its graph is not for threads to edit at once.
        for share in shares:
            _run_groups(share, q, k, v, out, scale)
        return out
    # Grad and inference modes are per thread: the workers take the caller's.
    modes = (torch.is_inference_mode_enabled(), torch.is_grad_enabled())
    pool = _pool(len(shares))
    done = [pool.submit(_run_in_modes, modes, share, q, k, v, out, scale) for share in shares]
    for future in done:
        future.result()
    return out


def _run_in_modes(modes: tuple[bool, bool], *args: Any) -> None:
    with torch.inference_mode(modes[0]), torch.set_grad_enabled(modes[1]):
        _run_groups(*args)


def _run_groups(
    groups: list[_Group], q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
    out: torch.Tensor, scale: float,
) -> None:
    """Attention for some length groups, written to their own rows of `out`."""
    heads, dim = q.shape[1], q.shape[2]
    for n, where, count in groups:
        if isinstance(where, int):
            rows = slice(where, where + n * count)
            qg, kg, vg = q[rows], k[rows], v[rows]
        else:
            qg, kg, vg = (x.index_select(0, where) for x in (q, k, v))
        o = F.scaled_dot_product_attention(
            *(x.reshape(count, n, heads, dim).transpose(1, 2) for x in (qg, kg, vg)),
            scale=scale,
        ).transpose(1, 2).reshape(count * n, heads, dim)
        if isinstance(where, int):
            out[rows] = o
        else:
            out.index_copy_(0, where, o)


def _shares(meta: EncoderMetadata) -> list[list[_Group]]:
    """The groups dealt to torch's intra-op thread count, costliest first to the least loaded
    (cost ~ count * length^2, plus a call's fixed overhead), made once per step. One thread
    per share, each call single-threaded: a call here is too small to split well (12 heads of
    a ~50-token sequence), and splitting it ends in a barrier per call that, on a busy
    machine, waits out a scheduler time slice; shares meet once per layer. The bench's first
    1,000 sentences end to end on a busy machine: 48 s with two threads inside each grouped
    call, 29 s one call per sequence single-threaded; then, same run, 18.6 s with the groups
    shared by two workers against 26.4 s all on one thread."""
    shares = meta.backend_state.get("shares")
    if shares is not None:
        return shares
    groups = _length_groups(meta)
    n = max(1, min(torch.get_num_threads(), len(groups)))
    shares = [[] for _ in range(n)]
    load = [0] * n
    for g in sorted(groups, key=lambda g: -_cost(g)):
        i = load.index(min(load))
        shares[i].append(g)
        load[i] += _cost(g)
    meta.backend_state["shares"] = shares
    return shares


def _cost(group: _Group) -> int:
    n, _, count = group
    return count * n * (n + 64)


_POOLS: dict[int, ThreadPoolExecutor] = {}


def _pool(n: int) -> ThreadPoolExecutor:
    """n worker threads, each with intra-op parallelism off (set per thread: it does not
    change the caller's thread count)."""
    pool = _POOLS.get(n)
    if pool is None:
        pool = _POOLS[n] = ThreadPoolExecutor(
            n, thread_name_prefix="encoder-attn", initializer=torch.set_num_threads,
            initargs=(1,),
        )
    return pool


def _padded_plan(meta: EncoderMetadata, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """(padded slot of each flat row [T], key mask [B, 1, 1, max_len]), made once per step."""
    plan = meta.backend_state.get("padded")
    if plan is None:
        lens = torch.tensor(meta.seq_lens_host, device=device)
        seq = torch.repeat_interleave(torch.arange(meta.num_seqs, device=device), lens)
        starts = meta.cu_seqlens[:-1].to(device)
        pos = torch.arange(seq.numel(), device=device) - starts[seq]
        slots = seq * meta.max_seqlen + pos
        mask = torch.arange(meta.max_seqlen, device=device)[None, :] < lens[:, None]
        plan = meta.backend_state["padded"] = (slots, mask[:, None, None, :])
    return plan


def padded_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, meta: EncoderMetadata, scale: float
) -> torch.Tensor:
    slots, mask = _padded_plan(meta, q.device)
    b, n, (_, heads, dim) = meta.num_seqs, meta.max_seqlen, q.shape

    def pad(x: torch.Tensor) -> torch.Tensor:
        buf = x.new_zeros(b * n, heads, dim)
        buf[slots] = x
        return buf.view(b, n, heads, dim).transpose(1, 2)

    o = F.scaled_dot_product_attention(pad(q), pad(k), pad(v), attn_mask=mask, scale=scale)
    return o.transpose(1, 2).reshape(b * n, heads, dim)[slots]
