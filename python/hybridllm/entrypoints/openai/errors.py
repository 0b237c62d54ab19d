"""The shell's own refusals (auth, an unknown path, an engine error, a bug), written as the
core writes every refusal (hybridllm._api: the OpenAI error body, its type and headers)."""

from __future__ import annotations

from typing import Any

import orjson
from starlette.responses import Response

from hybridllm import _api

UNAUTHORIZED = "Unauthorized: a valid API key is required (Authorization: Bearer <key>)."


def json_response(content: Any, status: int = 200,
                  headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(content), status, headers, media_type="application/json")


class ApiError(Exception):
    def __init__(self, status: int, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.param = status, message, param

    def response(self) -> Response:
        status, body, headers = _api.error_response(self.status, self.message, self.param)
        return Response(body, status, dict(headers), media_type="application/json")

    def body(self) -> bytes:
        """The error's JSON body (also the payload of an SSE error event mid-stream)."""
        return _api.error_response(self.status, self.message, self.param)[1].encode()


def bad(message: str, param: str | None = None) -> ApiError:
    return ApiError(400, message, param)


def internal(message: str) -> ApiError:
    return ApiError(500, message)


def from_engine(code: str, message: str, param: str | None = None) -> ApiError:
    """Maps a gRPC status code name (e.g. "INVALID_ARGUMENT") like the core's EngineError."""
    if code in ("INVALID_ARGUMENT", "OUT_OF_RANGE", "FAILED_PRECONDITION"):
        return bad(message, param)
    if code == "NOT_FOUND":
        return ApiError(404, message)
    if code == "RESOURCE_EXHAUSTED":  # the worker's admission control
        return ApiError(429, message)
    if code in ("UNAVAILABLE", "DEADLINE_EXCEEDED", "CANCELLED"):
        return ApiError(503, f"The engine is unavailable: {message}")
    return internal(f"Engine error: {message}")
