"""Turning logits into tokens: logits processing, sampling and logprobs."""

from __future__ import annotations

import torch

from hybridllm.models.interfaces import DecoderConfig
from hybridllm.sampling.sampler import Sampler
from hybridllm.step_types import TokenSampler


def build_sampler(model: DecoderConfig, seed: int, device: torch.device) -> TokenSampler:
    """The Triton sampler on CUDA, the torch one elsewhere."""
    if device.type == "cuda":
        from hybridllm.sampling.gpu_sampler import GpuSampler  # imports Triton

        return GpuSampler(model.vocab_size, model.eos_token_ids, seed, device)
    return Sampler(model.vocab_size, model.eos_token_ids, seed)


__all__ = ["Sampler", "build_sampler"]
