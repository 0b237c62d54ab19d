"""Logits processors as pure functions over a batch of rows (one row per sequence).

Order, as in vLLM: min_tokens masking, logit_bias, penalties; then (random rows only)
temperature and the top-k / top-p / min-p truncations.
"""

from __future__ import annotations

import torch

NEG_INF = float("-inf")


def token_counts(rows: list[list[int]], vocab: int, device: torch.device) -> torch.Tensor:
    """[len(rows), vocab] counts of each token id in each row."""
    width = max((len(r) for r in rows), default=0)
    counts = torch.zeros(len(rows), vocab + 1, device=device)
    if width:
        ids = torch.full((len(rows), width), vocab, dtype=torch.long)
        for i, r in enumerate(rows):
            ids[i, : len(r)] = torch.tensor(r, dtype=torch.long)
        counts.scatter_add_(1, ids.to(device), torch.ones(ids.shape, device=device))
    return counts[:, :vocab]  # column `vocab` absorbed the padding


def apply_penalties(
    logits: torch.Tensor,
    prompt_counts: torch.Tensor,
    output_counts: torch.Tensor,
    repetition: torch.Tensor,
    frequency: torch.Tensor,
    presence: torch.Tensor,
) -> torch.Tensor:
    """repetition: divide positive / multiply negative logits of any seen token;
    frequency and presence: subtract per output occurrence / once per output token."""
    seen = (prompt_counts + output_counts) > 0
    rep = repetition[:, None]
    penalized = torch.where(logits > 0, logits / rep, logits * rep)
    logits = torch.where(seen, penalized, logits)
    logits = logits - frequency[:, None] * output_counts
    return logits - presence[:, None] * (output_counts > 0).to(logits.dtype)


def apply_top_k_top_p_min_p(
    logits: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor, min_p: torch.Tensor
) -> torch.Tensor:
    """Mask everything outside each row's top-k, top-p nucleus and min-p floor."""
    vocab = logits.shape[-1]
    sorted_logits, order = logits.sort(dim=-1, descending=True)
    ranks = torch.arange(vocab, device=logits.device)[None, :]
    k = torch.where(top_k > 0, top_k, vocab)[:, None]
    drop = ranks >= k
    probs = sorted_logits.masked_fill(drop, NEG_INF).softmax(dim=-1)
    before = probs.cumsum(dim=-1) - probs  # mass strictly above each token
    drop |= before > top_p[:, None]
    drop |= probs < (min_p[:, None] * probs[:, :1])
    drop[:, 0] = False  # the most likely token always survives
    sorted_logits = sorted_logits.masked_fill(drop, NEG_INF)
    return torch.empty_like(logits).scatter_(1, order, sorted_logits)


def banned_tokens(bad_words_ids: list[list[int]], output_ids: list[int]) -> list[int]:
    """vLLM's bad_words (tokenized by text/bad_words.py): the last token of every bad word
    whose other tokens the output ends with (a one-token word's always), which must not
    come next."""
    banned = []
    n = len(output_ids)
    for ids in bad_words_ids:
        k = len(ids) - 1
        if k <= n and (k == 0 or output_ids[n - k:] == ids[:-1]):
            banned.append(ids[-1])
    return banned
