"""Refusals as HTTP responses. Every one is the core's (hybridllm._api.ApiError: its args are
the status, the OpenAI error body and the headers that kind of refusal carries); the engine's
are mapped by the core too."""

from __future__ import annotations

import grpc
from starlette.responses import Response

from hybridllm import _api
from hybridllm.server.engine_mux import EngineCallError


def response(e: _api.ApiError) -> Response:
    status, body, headers = e.args
    return Response(body, status, dict(headers), media_type="application/json")


def body(e: _api.ApiError) -> bytes:
    """The error's JSON body (also the payload of an SSE error event mid-stream)."""
    return e.args[1].encode()


def from_engine(e: EngineCallError) -> _api.ApiError:
    return _api.engine_error(grpc.StatusCode[e.code].value[0], e.message, e.param)
