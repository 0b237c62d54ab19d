"""GET /v1/models, /health, /version, /metrics, /openapi.json and POST /tokenize, /detokenize
(models.rs)."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from hybridllm import __version__
from hybridllm.entrypoints.engine_client import EngineCallError
from hybridllm.entrypoints.openai.errors import bad, json_response
from hybridllm.entrypoints.openai.generate import tokenize as encode
from hybridllm.entrypoints.openai.prompt import render_prompt
from hybridllm.entrypoints.openai.protocol import DetokenizeRequest, TokenizeRequest, read_request
from hybridllm.entrypoints.openai.state import check_model, get_state, new_id

router = APIRouter()
logger = logging.getLogger("hybridllm.frontend")


@router.get("/v1/models")
async def models(request: Request) -> Response:
    st = get_state(request)
    data = [{
        "id": name, "object": "model", "created": st.created, "owned_by": "hybridllm",
        "root": st.model_info.model_path, "parent": None, "max_model_len": st.max_model_len,
        "permission": [{
            "id": new_id("modelperm"), "object": "model_permission", "created": st.created,
            "allow_create_engine": False, "allow_sampling": True, "allow_logprobs": True,
            "allow_search_indices": False, "allow_view": True, "allow_fine_tuning": False,
            "organization": "*", "group": None, "is_blocking": False,
        }],
    } for name in st.served_names]
    return json_response({"object": "list", "data": data})


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
    return json_response({"version": __version__})


# The OpenAPI 3 document the Rust frontend serves too (it compiles this very file in).
OPENAPI = (Path(__file__).parent / "openapi.json").read_bytes()


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
    try:
        st.metrics.apply_load(await asyncio.wait_for(st.engine.load(), 2.0))
    except (asyncio.TimeoutError, EngineCallError):
        logger.debug("GetLoad failed; serving stale scheduler metrics")
    return Response(st.metrics.render(),
                    headers={"content-type": "text/plain; version=0.0.4; charset=utf-8"})


@router.post("/tokenize")
async def tokenize(request: Request) -> Response:
    st = get_state(request)
    req = await read_request(request, TokenizeRequest, st.options.max_request_body_bytes)
    check_model(st, req.model)
    if req.prompt is not None and req.messages is None:
        text, default_special = req.prompt, True
    elif req.messages is not None and req.prompt is None:
        text, default_special = render_prompt(st, req.messages, req, True), False
    else:
        raise bad("Exactly one of `prompt` or `messages` must be given.")
    special = default_special if req.add_special_tokens is None else req.add_special_tokens
    tokens = await encode(st, text, special)
    return json_response({"count": len(tokens), "max_model_len": st.max_model_len,
                          "tokens": tokens})


@router.post("/detokenize")
async def detokenize(request: Request) -> Response:
    st = get_state(request)
    req = await read_request(request, DetokenizeRequest, st.options.max_request_body_bytes)
    check_model(st, req.model)
    badid = next((t for t in req.tokens if t >= st.vocab_size), None)
    if badid is not None:
        raise bad(f"Token id {badid} is out of vocabulary (size {st.vocab_size}).", "tokens")
    return json_response({"prompt": st.tokenizer.decode(req.tokens)})
