"""Turning logits into tokens: logits processing, sampling and logprobs."""

from hybridllm.sampling.sampler import Sampler, SamplerOutput

__all__ = ["Sampler", "SamplerOutput"]
