"""GpuSampler (the runner's CUDA sampler) on real Sequence objects, Triton on the interpreter
when there is no GPU: per-row tensors built from SamplingParams, min_tokens / logit_bias like
the CPU Sampler, same logprobs, seeded reproducibility and batch independence."""

from __future__ import annotations

import torch

from hybridllm.kernels.sampler_ref import sample_reference
from hybridllm.sampling import Sampler
from hybridllm.sampling.gpu_sampler import GpuSampler
from hybridllm.sampling_params import SamplingParams
from hybridllm.sequence import Request, Sequence, make_generator

VOCAB = 64
EOS = (3,)


def _seq(params: SamplingParams, outputs: list[int] = (), index: int = 0) -> Sequence:
    req = Request("r", None, [5, 6, 7, 5], params, max_tokens=32)
    seq = Sequence(req, index, make_generator(params.seed, index))
    seq.token_ids.extend(outputs)
    return seq


def _logits(batch: int, device: torch.device, seed: int = 0) -> torch.Tensor:
    return torch.randn(batch, VOCAB, generator=torch.Generator().manual_seed(seed)).to(device)


def test_greedy_processing_matches_cpu_sampler(device: torch.device) -> None:
    seqs = [
        _seq(SamplingParams(temperature=0, logprobs=2)),
        _seq(SamplingParams(temperature=0, min_tokens=4, stop_token_ids=[9])),
        _seq(SamplingParams(temperature=0, logit_bias={11: 50.0, 3: 60.0}, min_tokens=1)),
        _seq(SamplingParams(temperature=0, repetition_penalty=1.5, presence_penalty=1.0,
                            frequency_penalty=0.5, logprobs=0), outputs=[8, 8, 2]),
    ]
    logits = _logits(len(seqs), device)
    logits[1, [3, 9]] = 100.0  # EOS and a stop id would win but min_tokens masks them
    logits[3, 8] = 3.0  # penalized: seen twice in the output
    gpu = GpuSampler(VOCAB, EOS, 0, device)(logits.clone(), seqs)
    cpu = Sampler(VOCAB, EOS, 0)(logits.cpu().clone(), seqs)
    assert gpu.token_ids == cpu.token_ids
    assert gpu.token_ids[2] == 11  # biased, and EOS (biased more) is still masked
    for a, b in zip(gpu.logprobs, cpu.logprobs):
        assert (a is None) == (b is None)
        if a is not None:
            assert a.keys() == b.keys()
            for tok in a:
                assert abs(a[tok].logprob - b[tok].logprob) < 1e-5 and a[tok].rank == b[tok].rank


def test_sampled_rows_follow_reference_and_params(device: torch.device) -> None:
    seqs = [
        _seq(SamplingParams(temperature=0.8, top_k=5, seed=1)),
        _seq(SamplingParams(temperature=1.2, top_p=0.7, min_p=0.05, seed=2), outputs=[1, 2]),
        _seq(SamplingParams(temperature=1.0, top_k=1)),  # unseeded; top_k=1 is argmax
        _seq(SamplingParams(temperature=0)),
        _seq(SamplingParams(temperature=1.0, min_tokens=5, repetition_penalty=1.3), [4]),
    ]
    logits = _logits(len(seqs), device, seed=1)
    logits[4, 3] = 50.0
    sampler = GpuSampler(VOCAB, EOS, 0, device)
    t = sampler.sampling_tensors(seqs)
    assert t.temperature.tolist()[3] == 0.0 and t.top_k.tolist() == [5, 0, 1, 0, 0]
    assert t.steps.tolist() == [0, 2, 0, 0, 1]
    masked = logits.clone()
    masked[4, 3] = float("-inf")  # min_tokens, applied before the kernel
    expected = sample_reference(masked, t).tolist()
    got = sampler(logits.clone(), seqs).token_ids
    assert got == expected
    assert got[2] == int(logits[2].argmax()) and got[3] == int(logits[3].argmax())
    assert got[4] != 3


def test_seeded_reproducible_and_batch_independent(device: torch.device) -> None:
    params = SamplingParams(temperature=1.0, seed=1234)
    logits = _logits(6, device, seed=2)
    alone = [GpuSampler(VOCAB, EOS, s, device)(logits[i : i + 1].clone(), [_seq(params)])
             .token_ids[0] for s, i in ((0, 0), (7, 0))]
    assert alone[0] == alone[1]  # another engine seed, the same seeded sample
    mates = [_seq(SamplingParams(temperature=1.0)) for _ in range(5)]
    batch = torch.cat([logits[1:3], logits[0:1], logits[3:6]])
    in_batch = GpuSampler(VOCAB, EOS, 0, device)(batch, [*mates[:2], _seq(params), *mates[2:]])
    assert in_batch.token_ids[2] == alone[0]
    # Draws advance with the step: 32 steps of a flat distribution are not all one token.
    flat = torch.zeros(1, VOCAB, device=device)
    draws = {GpuSampler(VOCAB, EOS, 0, device)(flat.clone(), [_seq(params, [1] * k)]).token_ids[0]
             for k in range(32)}
    assert len(draws) > 8


def test_unseeded_rows_get_distinct_stable_seeds(device: torch.device) -> None:
    sampler = GpuSampler(VOCAB, EOS, 0, device)
    seqs = [_seq(SamplingParams(temperature=1.0)) for _ in range(4)]
    first = [sampler.row_seed(s) for s in seqs]
    assert len(set(first)) == 4 and [sampler.row_seed(s) for s in seqs] == first
    seeded = [_seq(SamplingParams(seed=5), index=i) for i in range(2)]
    assert sampler.row_seed(seeded[0]) != sampler.row_seed(seeded[1])


def test_allowed_token_ids_match_cpu_sampler(device: torch.device) -> None:
    allowed = [4, 9, 17]
    seqs = [
        _seq(SamplingParams(temperature=0, allowed_token_ids=allowed, logit_bias={30: 80.0})),
        _seq(SamplingParams(temperature=1.0, seed=5, allowed_token_ids=allowed, logprobs=1)),
        _seq(SamplingParams(temperature=0)),  # unrestricted: its row is left alone
    ]
    logits = _logits(len(seqs), device)
    logits[:, 30] = 50.0  # the best token everywhere, allowed nowhere
    gpu = GpuSampler(VOCAB, EOS, 0, device)(logits.clone(), seqs)
    cpu = Sampler(VOCAB, EOS, 0)(logits.cpu().clone(), seqs)
    assert gpu.token_ids == cpu.token_ids
    assert gpu.token_ids[0] in allowed and gpu.token_ids[1] in allowed
    assert gpu.token_ids[2] == 30
    assert gpu.token_ids[0] == max(allowed, key=lambda t: logits[0, t].item())


def test_bad_words_match_cpu_sampler(device: torch.device) -> None:
    """A one-token word always banned; the two-token word [8, 30] only after an 8."""
    seqs = []
    for outputs in ([], [8], [3]):
        seq = _seq(SamplingParams(temperature=0, bad_words=["x"]), outputs)
        seq.request.bad_words_ids = [[12], [8, 30]]
        seqs.append(seq)
    logits = _logits(len(seqs), device)
    logits[:, 12] = 60.0  # the best token everywhere, banned everywhere
    logits[:, 30] = 50.0  # the next best, banned after an 8
    gpu = GpuSampler(VOCAB, EOS, 0, device)(logits.clone(), seqs)
    cpu = Sampler(VOCAB, EOS, 0)(logits.cpu().clone(), seqs)
    assert gpu.token_ids == cpu.token_ids
    assert gpu.token_ids[0] == 30 and gpu.token_ids[2] == 30
    assert gpu.token_ids[1] not in (12, 30)

