"""The Python fallback of the OpenAI-compatible HTTP frontend (FastAPI under uvicorn).

It answers as `rust-frontend/src` does: same status codes, JSON values, error types and
params, SSE events; `tests/conformance` holds them equal.
"""
