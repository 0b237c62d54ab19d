"""hybridllm: OpenAI-compatible LLM inference server (Rust HTTP frontend, Python engine)."""

from hybridllm.entrypoints.llm import LLM
from hybridllm.outputs import CompletionOutput, RequestOutput
from hybridllm.sampling_params import SamplingParams

__all__ = ["LLM", "SamplingParams", "RequestOutput", "CompletionOutput"]
__version__ = "0.1.0"
