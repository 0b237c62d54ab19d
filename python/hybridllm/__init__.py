"""hybridllm: OpenAI-compatible LLM inference server (Rust HTTP frontend, Python engine)."""

from hybridllm.entrypoints.generate.beam_search.utils import BeamSearchOutput, BeamSearchSequence
from hybridllm.entrypoints.llm import LLM
from hybridllm.outputs import (
    CompletionOutput,
    EmbeddingOutput,
    EmbeddingRequestOutput,
    PoolingOutput,
    PoolingRequestOutput,
    RequestOutput,
)
from hybridllm.pooling_params import PoolingParams
from hybridllm.sampling_params import BeamSearchParams, SamplingParams

__all__ = [
    "LLM", "SamplingParams", "BeamSearchParams", "BeamSearchOutput", "BeamSearchSequence",
    "PoolingParams", "RequestOutput", "CompletionOutput",
    "PoolingRequestOutput", "PoolingOutput", "EmbeddingRequestOutput", "EmbeddingOutput",
]
__version__ = "0.1.0"
