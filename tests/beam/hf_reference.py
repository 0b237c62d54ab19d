"""transformers' beam search as the reference, and each beam's score recomputed by the
transformers model, to tell a real difference from a near-tie."""

from __future__ import annotations

import torch

EOS = 2  # SmolLM2's EOS (also its pad token)


def hf_beams(
    hf_model, prompt_ids: list[int], k: int, max_tokens: int, ignore_eos: bool,
    early_stopping: bool | str = False, length_penalty: float = 1.0,
) -> list[tuple[list[int], float]]:
    """transformers' k returned beams: (generated ids up to and with the EOS, score)."""
    ids = torch.tensor([prompt_ids])
    with torch.inference_mode():
        out = hf_model.generate(
            ids, attention_mask=torch.ones_like(ids), num_beams=k, num_return_sequences=k,
            do_sample=False, length_penalty=length_penalty, early_stopping=early_stopping,
            max_new_tokens=max_tokens, min_new_tokens=max_tokens if ignore_eos else 0,
            pad_token_id=EOS, output_scores=True, return_dict_in_generate=True,
        )
    beams = []
    for seq, score in zip(out.sequences, out.sequences_scores):
        gen = seq[len(prompt_ids) :].tolist()
        if EOS in gen:  # the EOS that ended it, then padding (pad is EOS here)
            gen = gen[: gen.index(EOS) + 1]
        beams.append((gen, float(score)))
    return beams


def hf_score(
    hf_model, prompt_ids: list[int], gen: list[int], ignore_eos: bool, length_penalty: float
) -> float:
    """A beam's score as transformers computes it: fp32 log-softmax (EOS masked after it for
    ignore_eos), summed over the generated ids, / generated length ** length_penalty."""
    full = torch.tensor([prompt_ids + gen])
    with torch.inference_mode():
        logprobs = hf_model(full).logits[0].float().log_softmax(-1)
        if ignore_eos:
            logprobs[:, EOS] = float("-inf")
    rows = torch.arange(len(prompt_ids) - 1, len(prompt_ids) - 1 + len(gen))
    cum = logprobs[rows, torch.tensor(gen)].sum().item()
    return cum / (len(gen) ** length_penalty)


def assert_equal_or_near_tie(
    hf_model, prompt_ids: list[int], ours: list[list[int]], ref: list[tuple[list[int], float]],
    ignore_eos: bool, length_penalty: float, tol: float = 1e-4,
) -> int:
    """Our beams equal transformers' in order; where one differs, the two competing beams'
    scores (both recomputed by transformers) must be within `tol`. Returns the near-ties."""
    assert len(ours) == len(ref)
    ties = 0
    for rank, (gen, (ref_gen, ref_score)) in enumerate(zip(ours, ref)):
        if gen == ref_gen:
            continue
        mine = hf_score(hf_model, prompt_ids, gen, ignore_eos, length_penalty)
        theirs = hf_score(hf_model, prompt_ids, ref_gen, ignore_eos, length_penalty)
        assert abs(theirs - ref_score) < 1e-3, (rank, theirs, ref_score)
        assert abs(mine - theirs) <= tol, (
            f"beam {rank} differs and is no near-tie: ours {gen} scores {mine}, "
            f"transformers' {ref_gen} scores {theirs}"
        )
        ties += 1
    return ties
