"""Every failure a client can see: status code and the OpenAI error body, as errors.rs has them;
and the JSON response every body goes out in."""

from __future__ import annotations

from typing import Any

import orjson
from starlette.responses import Response

_TYPES = {
    400: "BadRequestError",
    401: "AuthenticationError",
    404: "NotFoundError",
    413: "PayloadTooLargeError",
    415: "UnsupportedMediaTypeError",
    429: "RateLimitError",
    431: "RequestHeaderFieldsTooLargeError",
    500: "InternalServerError",
    503: "ServiceUnavailableError",
}

RETRY_AFTER_S = "1"  # what a 429 (admission control) asks the client to wait
UNAUTHORIZED = "Unauthorized: a valid API key is required (Authorization: Bearer <key>)."


def json_response(content: Any, status: int = 200,
                  headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(content), status, headers, media_type="application/json")


class ApiError(Exception):
    def __init__(self, status: int, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.param = status, message, param

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": _TYPES[self.status],
                          "param": self.param, "code": self.status}}

    def response(self) -> Response:
        headers = ({"www-authenticate": "Bearer"} if self.status == 401
                   else {"retry-after": RETRY_AFTER_S} if self.status == 429 else None)
        return json_response(self.body(), self.status, headers)


def bad(message: str, param: str | None = None) -> ApiError:
    return ApiError(400, message, param)


def internal(message: str) -> ApiError:
    return ApiError(500, message)


def from_engine(code: str, message: str) -> ApiError:
    """Maps a gRPC status code name (e.g. "INVALID_ARGUMENT") like ApiError::from_status."""
    if code in ("INVALID_ARGUMENT", "OUT_OF_RANGE", "FAILED_PRECONDITION"):
        return bad(message)
    if code == "NOT_FOUND":
        return ApiError(404, message)
    if code == "RESOURCE_EXHAUSTED":  # the worker's admission control
        return ApiError(429, message)
    if code in ("UNAVAILABLE", "DEADLINE_EXCEEDED", "CANCELLED"):
        return ApiError(503, f"The engine is unavailable: {message}")
    return internal(f"Engine error: {message}")
