"""Comparing our beams with transformers' (the `beams` golden reference): a differing beam
must be a near-tie, both competing beams rescored by transformers' forward pass."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tests.golden.kinds import hf_score


def rescorer(prompt_ids: list[int], ignore_eos: bool,
             length_penalty: float) -> Callable[[list[int]], float]:
    """A beam's score as transformers computes it (tests.golden.kinds.hf_score), computed live:
    only called where our beam is not the reference's, so the model loads only then."""
    return lambda gen: hf_score(prompt_ids, gen, ignore_eos, length_penalty)


def assert_equal_or_near_tie(
    ours: list[list[int]], ref: list[list[Any]], rescore: Callable[[list[int]], float],
    tol: float = 1e-4,
) -> int:
    """Our beams equal transformers' `ref` ([ids, score, rescored] each) in order; where one
    differs, the two competing beams' scores (both by transformers) must be within `tol`.
    Returns the near-ties."""
    assert len(ours) == len(ref)
    ties = 0
    for rank, (gen, (ref_gen, ref_score, ref_rescored)) in enumerate(zip(ours, ref)):
        # The stored rescoring agrees with the score generate() reported.
        assert abs(ref_rescored - ref_score) < 1e-3, (rank, ref_rescored, ref_score)
        if gen == ref_gen:
            continue
        mine = rescore(gen)
        assert abs(mine - ref_rescored) <= tol, (
            f"beam {rank} differs and is no near-tie: ours {gen} scores {mine}, "
            f"transformers' {ref_gen} scores {ref_rescored}"
        )
        ties += 1
    return ties
