"""GET /v1/models, /health, /version, /metrics, /openapi.json, /tokenizer_info and POST
/tokenize, /detokenize (models.rs, tokenizer_info.rs)."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import orjson
from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from hybridllm import __version__, _api
from hybridllm.entrypoints.openai.body import read_body
from hybridllm.entrypoints.openai.generate import tokenize as encode
from hybridllm.entrypoints.openai.state import get_state
from hybridllm.server.engine_client import EngineCallError

router = APIRouter()
logger = logging.getLogger("hybridllm.frontend")


@router.get("/v1/models")
async def models(request: Request) -> Response:
    st = get_state(request)
    return _json(_api.models(st.api, st.created, st.model_info.model_path))


def _json(body: str | bytes) -> Response:
    return Response(body, media_type="application/json")


@router.get("/health")
async def health(request: Request) -> Response:
    """200 with an empty body while the engine is serving, else 503."""
    try:
        ok = await asyncio.wait_for(get_state(request).engine.health(), 5.0)
    except (asyncio.TimeoutError, EngineCallError):
        ok = False
    return Response(status_code=200 if ok else 503)


@router.get("/version")
async def version() -> Response:
    return _json(orjson.dumps({"version": __version__}))


@router.get("/load")
async def load(request: Request) -> Response:
    st = get_state(request)
    return _json(_api.load(st.metrics, st.options.enable_server_load_tracking))


# The API core's OpenAPI document, the one the Rust frontend serves too.
OPENAPI = _api.openapi_json().encode()


PLAYGROUND = (Path(__file__).parent / "playground.html").read_bytes()
playground_router = APIRouter()  # included unless --disable-playground


@playground_router.get("/")
async def playground() -> Response:
    return Response(PLAYGROUND, media_type="text/html; charset=utf-8")


@router.get("/openapi.json")
async def openapi() -> Response:
    return Response(OPENAPI, media_type="application/json")


@router.get("/metrics")
async def metrics(request: Request) -> Response:
    st = get_state(request)
    try:  # the scheduler's gauges and the engine's counters, refreshed at scrape time
        st.metrics.apply_load(await asyncio.wait_for(st.engine.load(), 2.0))
    except (asyncio.TimeoutError, EngineCallError):
        logger.debug("GetLoad failed; serving stale scheduler metrics")
    return Response(st.metrics.render(),
                    headers={"content-type": "text/plain; version=0.0.4; charset=utf-8"})


@router.post("/tokenize")
async def tokenize(request: Request) -> Response:
    st = get_state(request)
    body = await read_body(request, st.options.max_request_body_bytes)
    text, special, strs = _api.tokenize_call(st.api, body)
    return _json(_api.tokenize_body(st.api, await encode(st, text, special), strs))


@router.get("/tokenizer_info")
async def tokenizer_info(request: Request) -> Response:
    """vLLM's: the core's body, from the tokenizer_config.json beside the tokenizer."""
    st = get_state(request)
    path = Path(st.options.tokenizer_path or st.model_info.tokenizer_path)
    path = path.with_name("tokenizer_config.json")
    try:
        text: str | None = path.read_text()
    except OSError:
        text = None  # a bare tokenizer.json has no configuration
    return _json(_api.tokenizer_info(st.api, str(path), text))


@router.post("/detokenize")
async def detokenize(request: Request) -> Response:
    st = get_state(request)
    body = await read_body(request, st.options.max_request_body_bytes)
    return _json(_api.detokenize(st.api, body))
