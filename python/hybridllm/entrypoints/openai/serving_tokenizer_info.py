"""GET /tokenizer_info (tokenizer_info.rs), vLLM's: the tokenizer's configuration as its
tokenizer_config.json holds it (transformers' `init_kwargs`), special tokens as plain strings,
the added-token table left out, with the chat template and context window this server uses."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from hybridllm.entrypoints.openai.errors import ApiError, json_response
from hybridllm.entrypoints.openai.state import get_state

router = APIRouter()


def _plain(v: Any) -> Any:
    """An AddedToken object (`{"content": ..., "lstrip": ...}`) as its text; lists likewise."""
    if isinstance(v, dict) and isinstance(v.get("content"), str):
        return v["content"]
    if isinstance(v, list):
        return [_plain(x) for x in v]
    return v


def _read_config(tokenizer_path: str) -> dict[str, Any]:
    path = Path(tokenizer_path).with_name("tokenizer_config.json")
    try:
        text = path.read_text()
    except OSError:
        return {}  # a bare tokenizer.json has no configuration
    try:
        cfg = json.loads(text)
    except ValueError:
        cfg = None
    if not isinstance(cfg, dict):
        raise ApiError(500, f"{path} is not a JSON object")
    return cfg


@router.get("/tokenizer_info")
async def tokenizer_info(request: Request) -> Response:
    st = get_state(request)
    info = st.model_info
    cfg = {k: _plain(v) for k, v in _read_config(st.options.tokenizer_path or info.tokenizer_path)
           .items() if k != "added_tokens_decoder"}
    for key, value in (("bos_token", info.bos_token), ("eos_token", info.eos_token)):
        if value:
            cfg[key] = value
    cfg.setdefault("tokenizer_class", "PreTrainedTokenizerFast")
    cfg["model_max_length"] = st.max_model_len
    cfg.pop("chat_template", None)
    if st.template is not None:
        cfg["chat_template"] = st.template.source
    return json_response(cfg)
