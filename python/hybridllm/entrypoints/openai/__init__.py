"""The Python fallback of the OpenAI-compatible HTTP frontend (FastAPI under uvicorn).

It mirrors `rust-frontend/src` response for response; `tests/conformance` holds them equal.
"""

from hybridllm.entrypoints.openai.api_server import add_frontend_args, build_app, run_python_server

__all__ = ["add_frontend_args", "build_app", "run_python_server"]
