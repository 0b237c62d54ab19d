"""hybridllm: OpenAI-compatible LLM inference server (Rust HTTP frontend, Python engine).

The root is lazy: `from hybridllm import LLM` imports the offline entry point on first use, so
importing a leaf (a kernel, the worker, a tensor-parallel rank, the API core `hybridllm._api`)
loads only what that leaf needs."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# Each public name and the module it comes from.
_EXPORTS = {
    "LLM": "hybridllm.entrypoints.llm",
    "SamplingParams": "hybridllm.sampling_params",
    "BeamSearchParams": "hybridllm.sampling_params",
    "StructuredOutputsParams": "hybridllm.sampling_params",
    "BeamSearchOutput": "hybridllm.entrypoints.generate.beam_search.utils",
    "BeamSearchSequence": "hybridllm.entrypoints.generate.beam_search.utils",
    "PoolingParams": "hybridllm.pooling_params",
    "RequestOutput": "hybridllm.outputs",
    "CompletionOutput": "hybridllm.outputs",
    "PoolingRequestOutput": "hybridllm.outputs",
    "PoolingOutput": "hybridllm.outputs",
    "EmbeddingRequestOutput": "hybridllm.outputs",
    "EmbeddingOutput": "hybridllm.outputs",
}
__all__ = [
    "LLM", "SamplingParams", "StructuredOutputsParams", "BeamSearchParams", "BeamSearchOutput",
    "BeamSearchSequence",
    "PoolingParams", "RequestOutput", "CompletionOutput",
    "PoolingRequestOutput", "PoolingOutput", "EmbeddingRequestOutput", "EmbeddingOutput",
]
__version__ = "0.1.0"

if TYPE_CHECKING:  # for type checkers only (and no import edge for lint-imports)
    from hybridllm.entrypoints.generate.beam_search.utils import (
        BeamSearchOutput,
        BeamSearchSequence,
    )
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
    from hybridllm.sampling_params import (
        BeamSearchParams,
        SamplingParams,
        StructuredOutputsParams,
    )


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'hybridllm' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # the next lookup is a plain attribute
    return value
