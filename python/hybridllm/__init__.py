"""hybridllm: OpenAI-compatible LLM inference server."""
