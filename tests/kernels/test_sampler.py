"""Triton sampler vs the torch reference sampler (kernels/sampler_ref.py).

Distribution-free checks: the processed logits (penalties, temperature, dropped tokens at
-inf) match the reference's, so the top-k / top-p / min-p support sets are equal; greedy rows
equal argmax; both draw from the same Philox stream, so seeded samples are equal token for
token; and a row's sample depends only on its own (seed, step, logits), not on batch mates.
Processed logits are compared at fp32 1e-6 relative: the same fp32 operations in the same
order, up to a fused multiply-add on the GPU.
"""

from __future__ import annotations

import pytest
import torch

from hybridllm.kernels.sampler import sample
from hybridllm.kernels.sampler_ref import (
    SamplingTensors,
    process_logits_reference,
    sample_reference,
)

requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def _params(batch: int, vocab: int, device: torch.device, seed: int) -> SamplingTensors:
    g = torch.Generator().manual_seed(seed)

    def pick(*choices: float) -> torch.Tensor:
        idx = torch.randint(0, len(choices), (batch,), generator=g)
        return torch.tensor(choices)[idx].float().to(device)

    return SamplingTensors(
        temperature=pick(0.0, 0.5, 1.0, 1.3),
        top_k=pick(0, 1, 5, 50, vocab).int(),
        top_p=pick(1.0, 0.9, 0.5),
        min_p=pick(0.0, 0.05),
        repetition_penalty=pick(1.0, 1.2),
        presence_penalty=pick(0.0, 0.5),
        frequency_penalty=pick(0.0, 0.2),
        seeds=torch.randint(-(2**62), 2**62, (batch,), generator=g).to(device),
        steps=torch.randint(0, 2**40, (batch,), generator=g).to(device),
        prompt_counts=torch.randint(0, 2, (batch, vocab), generator=g).int().to(device),
        output_counts=(torch.randint(0, 4, (batch, vocab), generator=g) * (
            torch.rand(batch, vocab, generator=g) < 0.05)).int().to(device),
    )


def _check_against_reference(batch: int, vocab: int, device: torch.device, seed: int) -> None:
    g = torch.Generator().manual_seed(seed + 1)
    logits = (3 * torch.randn(batch, vocab, generator=g)).to(device)
    params = _params(batch, vocab, device, seed)
    tokens, processed = sample(logits, params, return_logits=True)
    ref = process_logits_reference(logits, params)
    assert processed is not None
    assert torch.equal(torch.isinf(processed), torch.isinf(ref)), "support sets differ"
    finite = ~torch.isinf(ref)
    torch.testing.assert_close(processed[finite], ref[finite], atol=1e-6, rtol=1e-6)
    assert torch.equal(tokens, sample_reference(logits, params))
    assert bool(finite.gather(1, tokens[:, None]).all()), "sampled a dropped token"


@pytest.mark.parametrize("seed", [0, 1])
def test_sampler_matches_reference(seed: int, device: torch.device) -> None:
    _check_against_reference(12, 1000, device, seed)


def test_greedy_first_argmax_and_penalties(device: torch.device) -> None:
    vocab = 300
    logits = torch.zeros(2, vocab, device=device)
    logits[:, 7] = logits[:, 9] = 2.0  # tie: the first index wins, as torch.argmax
    params = _params(2, vocab, device, 0)
    params.temperature.zero_()
    params.repetition_penalty.fill_(1.0)
    params.presence_penalty.zero_()
    params.frequency_penalty.zero_()
    params.prompt_counts = None
    params.output_counts = None
    assert sample(logits, params)[0].tolist() == [7, 7]
    counts = torch.zeros(2, vocab, dtype=torch.int32, device=device)
    counts[0, 7] = 1  # presence penalty pushes row 0 to the other maximum
    params.output_counts = counts
    params.presence_penalty.fill_(0.5)
    assert sample(logits, params)[0].tolist() == [9, 7]


def test_seeded_rows_ignore_batch_mates(device: torch.device) -> None:
    batch, vocab = 6, 500
    g = torch.Generator().manual_seed(7)
    logits = torch.randn(batch, vocab, generator=g).to(device)
    params = _params(batch, vocab, device, 3)
    params.temperature.fill_(1.0)
    tokens = sample(logits, params)[0]
    perm = torch.randperm(batch, generator=g).to(device)
    shuffled = SamplingTensors(**{
        name: (value[perm] if value is not None else None)
        for name, value in vars(params).items()
    })
    assert torch.equal(sample(logits[perm], shuffled)[0], tokens[perm])
    assert torch.equal(sample(logits, params)[0], tokens), "same (seed, step): same token"


def test_top_k_support_over_steps(device: torch.device) -> None:
    steps, vocab = 40, 200
    g = torch.Generator().manual_seed(9)
    logits = torch.randn(1, vocab, generator=g).expand(steps, vocab).contiguous().to(device)
    params = _params(steps, vocab, device, 4)
    for name in ("repetition_penalty", "temperature"):
        getattr(params, name).fill_(1.0)
    for name in ("presence_penalty", "frequency_penalty", "min_p"):
        getattr(params, name).zero_()
    params.top_p.fill_(1.0)
    params.top_k.fill_(4)
    params.seeds.fill_(1234)
    params.steps = torch.arange(steps, device=device)
    tokens = sample(logits, params)[0]
    top4 = set(torch.topk(logits[0], 4).indices.tolist())
    assert set(tokens.tolist()) <= top4
    assert len(set(tokens.tolist())) > 1, "different steps draw different samples"


@requires_cuda
def test_sampler_cuda_real_vocab(device: torch.device) -> None:
    _check_against_reference(64, 128256, device, 5)
