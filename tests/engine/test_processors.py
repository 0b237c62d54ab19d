"""The logits processors as pure functions, on hand-made rows."""

from __future__ import annotations

import torch

from hybridllm.sampling import processors

NEG = float("-inf")


def test_token_counts() -> None:
    counts = processors.token_counts([[1, 1, 3], []], vocab=5, device=torch.device("cpu"))
    assert counts.tolist() == [[0, 2, 0, 1, 0], [0, 0, 0, 0, 0]]


def test_penalties() -> None:
    logits = torch.tensor([[2.0, -2.0, 1.0, 1.0]])
    prompt = torch.tensor([[1.0, 0, 0, 0]])
    output = torch.tensor([[0, 1.0, 2.0, 0]])
    out = processors.apply_penalties(
        logits, prompt, output, torch.tensor([2.0]), torch.tensor([0.5]), torch.tensor([0.25])
    )
    # token 0: seen in prompt -> 2/2; token 1: -2*2 - 0.5 - 0.25; token 2: 1/2 - 1 - 0.25
    assert out.tolist() == [[1.0, -4.75, -0.75, 1.0]]


def test_top_k_top_p_min_p() -> None:
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]] * 3))
    out = processors.apply_top_k_top_p_min_p(
        logits, torch.tensor([2, -1, -1]), torch.tensor([1.0, 0.7, 1.0]),
        torch.tensor([0.0, 0.0, 0.25]),
    )
    kept = (out > NEG).tolist()
    assert kept[0] == [True, True, False, False]  # top_k=2
    assert kept[1] == [True, True, False, False]  # 0.5 + 0.3 reaches 0.7
    assert kept[2] == [True, True, True, False]  # min_p: >= 0.125
