"""The two packed-attention layouts (per sequence: CPU; padded with a key mask: CUDA) against
attention computed one sequence at a time with an explicit softmax."""

from __future__ import annotations

import torch

from hybridllm.attention.encoder import padded_attention, per_sequence_attention
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


def test_layouts_match_the_reference() -> None:
    torch.manual_seed(0)
    for lens in ([7], [1, 5, 33, 2, 17], [64, 1, 1]):
        t = sum(lens)
        q, k, v = (torch.randn(t, 4, 16, dtype=torch.float64) for _ in range(3))
        ref = _reference(q, k, v, lens, 0.25)
        for fn in (per_sequence_attention, padded_attention):
            got = fn(q, k, v, _meta(lens), 0.25)
            assert got.shape == (t, 4, 16)
            assert (got - ref).abs().max().item() < 1e-12, (fn.__name__, lens)


def test_sequences_do_not_see_each_other() -> None:
    torch.manual_seed(1)
    lens = [3, 4]
    q, k, v = (torch.randn(7, 2, 8) for _ in range(3))
    base = per_sequence_attention(q, k, v, _meta(lens), 1.0)
    v2 = v.clone()
    v2[3:] += 100.0  # change only the second sequence's values
    changed = per_sequence_attention(q, k, v2, _meta(lens), 1.0)
    assert torch.equal(base[:3], changed[:3])
    assert not torch.allclose(base[3:], changed[3:])
