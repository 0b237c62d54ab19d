"""A structured-output bitmask holds in both samplers: the torch one (with its greedy fast
path) and the CUDA one (its argmax path and the Triton kernel, on the interpreter without a
GPU); only the constrained rows change, and their logprobs are of the masked distribution."""

from __future__ import annotations

import math

import pytest
import torch

from hybridllm.sampling.gpu_sampler import GpuSampler
from hybridllm.sampling.sampler import Sampler
from hybridllm.sampling_params import SamplingParams
from hybridllm.sequence import Request, Sequence, make_generator
from hybridllm.step_types import TokenBitmask

VOCAB = 100
EOS = (0,)


def seq(params: SamplingParams) -> Sequence:
    request = Request("r", None, [5, 6, 7], params, max_tokens=8)
    return Sequence(request, 0, make_generator(params.seed, 0))


def bitmask(rows: dict[int, list[int]]) -> TokenBitmask:
    banned = torch.ones(len(rows), VOCAB, dtype=torch.bool)
    for j, allowed in enumerate(rows.values()):
        banned[j, allowed] = False
    return TokenBitmask(list(rows), torch.empty(0), banned)


@pytest.mark.parametrize("kind", ["torch", "cuda"])
def test_bitmask_constrains_only_its_rows(kind: str, device: torch.device) -> None:
    sampler = (Sampler(VOCAB, EOS, seed=0) if kind == "torch"
               else GpuSampler(VOCAB, EOS, seed=0, device=device))
    dev = device if kind == "cuda" else torch.device("cpu")
    greedy = SamplingParams(temperature=0)
    allowed = {0: [7, 50], 1: [3], 3: list(range(10, 20))}
    for step in range(5):
        logits = torch.randn(4, VOCAB, device=dev, generator=None)
        raw = logits.clone()
        seqs = [seq(greedy), seq(SamplingParams(temperature=1.5, seed=step)),
                seq(greedy), seq(SamplingParams(temperature=1.0, seed=step, logprobs=3))]
        # All greedy first: the samplers' argmax-only paths.
        out = sampler(logits[[0, 2]].clone(), [seqs[0], seqs[2]], bitmask({0: allowed[0]}))
        assert out.token_ids[0] == max(allowed[0], key=lambda t: raw[0, t].item())
        assert out.token_ids[1] == int(raw[2].argmax())
        out = sampler(logits, seqs, bitmask(allowed))
        assert out.token_ids[0] == max(allowed[0], key=lambda t: raw[0, t].item())
        assert out.token_ids[1] == 3
        assert out.token_ids[2] == int(raw[2].argmax())  # unconstrained: untouched
        assert out.token_ids[3] in allowed[3]
        entry = out.logprobs[3]
        assert entry is not None and set(entry) <= set(allowed[3])
        masked = raw[3, allowed[3]].log_softmax(-1)
        chosen = out.token_ids[3]
        assert math.isclose(entry[chosen].logprob, masked[allowed[3].index(chosen)].item(),
                            rel_tol=1e-4, abs_tol=1e-5)
