"""GET /tokenizer_info (tokenizer_info.rs), vLLM's: the body is the core's, from the
tokenizer_config.json beside the tokenizer."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from hybridllm import _api
from hybridllm.entrypoints.openai.state import get_state

router = APIRouter()


@router.get("/tokenizer_info")
async def tokenizer_info(request: Request) -> Response:
    st = get_state(request)
    path = Path(st.options.tokenizer_path or st.model_info.tokenizer_path)
    path = path.with_name("tokenizer_config.json")
    try:
        text: str | None = path.read_text()
    except OSError:
        text = None  # a bare tokenizer.json has no configuration
    return Response(_api.tokenizer_info(st.api, str(path), text), media_type="application/json")
