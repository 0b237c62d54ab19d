"""Beam-search rows of a step: each beam's best continuations from the fp32 log-softmax, and
the forked beams' block copies (copy on write of a last partial block)."""

from __future__ import annotations

import torch

from hybridllm.sequence import Sequence


def beam_candidates(
    logits: torch.Tensor, seqs: list[Sequence], eos_token_ids: tuple[int, ...]
) -> dict[int, tuple[list[float], list[int]]]:
    """Row -> (logprobs, token ids) of its `beam_topk` best tokens, for the beam rows.

    As transformers' beam search: log-softmax in fp32, then EOS masked for `ignore_eos` (its
    min_new_tokens processor runs after the log-softmax, so the other tokens keep their
    logprobs)."""
    rows = [i for i, s in enumerate(seqs) if s.beam_topk]
    if not rows:
        return {}
    idx = torch.tensor(rows, device=logits.device)
    logprobs = logits.index_select(0, idx).float().log_softmax(dim=-1)
    masked = [j for j, i in enumerate(rows) if seqs[i].params.ignore_eos]
    if masked and eos_token_ids:
        logprobs[torch.tensor(masked, device=logits.device)[:, None],
                 torch.tensor(eos_token_ids, device=logits.device)] = float("-inf")
    k = max(seqs[i].beam_topk for i in rows)
    values, ids = logprobs.topk(k, dim=-1)
    values_l, ids_l = values.tolist(), ids.tolist()
    return {
        i: (values_l[j][: seqs[i].beam_topk], ids_l[j][: seqs[i].beam_topk])
        for j, i in enumerate(rows)
    }


def copy_blocks(kv_caches: list[torch.Tensor], pairs: list[tuple[int, int]]) -> None:
    """Copy whole KV blocks src -> dst in every layer ([2, blocks, block_size, heads, dim])."""
    if not kv_caches:  # a runner without a cache (fake forward)
        return
    src = torch.tensor([p[0] for p in pairs], device=kv_caches[0].device)
    dst = torch.tensor([p[1] for p in pairs], device=kv_caches[0].device)
    for cache in kv_caches:
        # index_copy_ on the block dimension: an indexed assignment there took ~100x longer.
        cache.index_copy_(1, dst, cache.index_select(1, src))
