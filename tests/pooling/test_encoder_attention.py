"""The two packed-attention layouts (grouped by length: CPU; padded with a key mask: CUDA)
against attention computed one sequence at a time with an explicit softmax."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from hybridllm.attention.encoder import grouped_attention, padded_attention
from hybridllm.step_types import EncoderMetadata


def _meta(lens: list[int]) -> EncoderMetadata:
    cu = [0]
    for n in lens:
        cu.append(cu[-1] + n)
    return EncoderMetadata(torch.tensor(cu), lens, cu, max(lens))


def _reference(q, k, v, lens, scale):
    out, start = [], 0
    for n in lens:
        qs, ks, vs = (x[start : start + n].transpose(0, 1) for x in (q, k, v))
        probs = torch.softmax(qs @ ks.transpose(1, 2) * scale, dim=-1)
        out.append((probs @ vs).transpose(0, 1))
        start += n
    return torch.cat(out)


def _per_sequence_sdpa(q, k, v, lens, scale):
    """One scaled_dot_product_attention call per sequence: the fp32 kernel grouping must match."""
    out, start = [], 0
    for n in lens:
        qs, ks, vs = (x[start : start + n].transpose(0, 1) for x in (q, k, v))
        out.append(F.scaled_dot_product_attention(qs, ks, vs, scale=scale).transpose(0, 1))
        start += n
    return torch.cat(out)


# One sequence; all lengths distinct; equal lengths adjacent; equal lengths apart (gathered);
# longest first as the engine queues one call's inputs; a run of length-1 sequences.
LENS = ([7], [1, 5, 33, 2, 17], [64, 1, 1], [9, 9, 9, 4], [5, 12, 5, 3, 12, 5],
        [40, 40, 31, 31, 31, 8, 2, 2], [1, 1, 1, 1])


def test_layouts_match_the_reference() -> None:
    torch.manual_seed(0)
    for lens in LENS:
        t = sum(lens)
        q, k, v = (torch.randn(t, 4, 16, dtype=torch.float64) for _ in range(3))
        ref = _reference(q, k, v, lens, 0.25)
        for fn in (grouped_attention, padded_attention):
            got = fn(q, k, v, _meta(lens), 0.25)
            assert got.shape == (t, 4, 16)
            assert (got - ref).abs().max().item() < 1e-12, (fn.__name__, lens)


def test_grouped_equals_per_sequence_calls_in_fp32() -> None:
    """fp32 as the encoder runs it on CPU (q, k, v strided views of one fused QKV output):
    batching equal lengths into one call changes no value beyond fp32 rounding."""
    torch.manual_seed(2)
    for lens in LENS:
        t = sum(lens)
        q, k, v = torch.randn(t, 3, 12, 32).unbind(1)
        want = _per_sequence_sdpa(q, k, v, lens, 32**-0.5)
        got = grouped_attention(q, k, v, _meta(lens), 32**-0.5)
        assert got.dtype == torch.float32 and got.shape == (t, 12, 32)
        assert (got - want).abs().max().item() <= 1e-6, lens


def test_group_plan_is_made_once_per_step() -> None:
    torch.manual_seed(3)
    lens = [5, 12, 5, 3, 12, 5]
    meta = _meta(lens)
    q, k, v = (torch.randn(sum(lens), 2, 8) for _ in range(3))
    first = grouped_attention(q, k, v, meta, 0.5)
    groups = meta.backend_state["groups"]
    # Lengths 5 (rows apart: gathered), 12 (apart), 3 (alone): one group each.
    assert [(n, count) for n, _, count in groups] == [(5, 3), (12, 2), (3, 1)]
    assert groups[2][1] == 22 and torch.equal(
        groups[0][1], torch.cat([torch.arange(0, 5), torch.arange(17, 22), torch.arange(37, 42)])
    )
    assert torch.equal(grouped_attention(q, k, v, meta, 0.5), first)
    assert meta.backend_state["groups"] is groups


def test_sequences_do_not_see_each_other() -> None:
    torch.manual_seed(1)
    for lens in ([3, 4], [4, 4], [4, 2, 4]):
        t = sum(lens)
        q, k, v = (torch.randn(t, 2, 8) for _ in range(3))
        base = grouped_attention(q, k, v, _meta(lens), 1.0)
        v2 = v.clone()
        v2[lens[0]:] += 100.0  # change only the later sequences' values
        changed = grouped_attention(q, k, v2, _meta(lens), 1.0)
        assert torch.equal(base[: lens[0]], changed[: lens[0]]), lens
        assert not torch.allclose(base[lens[0]:], changed[lens[0]:]), lens


def test_threads_share_the_groups_under_the_callers_mode() -> None:
    """With two intra-op threads the length groups are dealt to two workers, each call
    single-threaded; the workers run in the caller's inference mode (the pooling runner's),
    write disjoint rows, and leave the caller's thread count as it was."""
    lens = [256, 256, 200, 57, 57, 57, 31, 9, 9, 2, 1]
    meta = _meta(lens)
    torch.manual_seed(4)
    q, k, v = torch.randn(sum(lens), 3, 12, 32).unbind(1)
    want = _per_sequence_sdpa(q, k, v, lens, 32**-0.5)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with torch.inference_mode():
            got = grouped_attention(q, k, v, meta, 32**-0.5)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
    shares = meta.backend_state["shares"]
    assert len(shares) == 2 and all(shares)
    assert sorted((n, c) for share in shares for n, _, c in share) == sorted(
        (n, lens.count(n)) for n in set(lens))
    assert got.is_inference() and (got - want).abs().max().item() <= 1e-6
    # Outside inference mode too (no_grad), and with one thread: one share, run inline.
    with torch.no_grad():
        assert (grouped_attention(q, k, v, _meta(lens), 32**-0.5) - want).abs().max() <= 1e-6
    torch.set_num_threads(1)
    try:
        one = _meta(lens)
        assert (grouped_attention(q, k, v, one, 32**-0.5) - want).abs().max() <= 1e-6
        assert len(one.backend_state["shares"]) == 1
    finally:
        torch.set_num_threads(before)
