"""The Python fallback of the OpenAI-compatible HTTP frontend (FastAPI under uvicorn).

It answers as `rust-frontend/src` does: same status codes, JSON values, error types and
params, SSE events; `tests/conformance` holds them equal.
"""

from hybridllm.entrypoints.openai.api_server import build_app, run_python_server

__all__ = ["build_app", "run_python_server"]
