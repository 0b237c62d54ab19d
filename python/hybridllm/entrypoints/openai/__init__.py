"""The Python fallback of the OpenAI-compatible HTTP frontend (FastAPI under uvicorn).

It mirrors `rust-frontend/src` response for response; `tests/conformance` holds them equal.
"""

from hybridllm.entrypoints.openai.api_server import build_app, run_python_server

__all__ = ["build_app", "run_python_server"]
