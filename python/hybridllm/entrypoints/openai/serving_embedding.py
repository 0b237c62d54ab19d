"""POST /v1/embeddings (embeddings.rs): inputs checked, tokenized and truncated here, pooled by
the engine's Embed call, returned as floats or base64 (little-endian float32)."""

from __future__ import annotations

import asyncio
import base64
from typing import Any

import numpy as np
import orjson
from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from hybridllm.entrypoints.engine_client import EngineCallError
from hybridllm.entrypoints.openai.disconnect import ClientDisconnected, unless_disconnected
from hybridllm.entrypoints.openai.errors import bad, from_engine
from hybridllm.entrypoints.openai.protocol import EmbeddingRequest, read_request
from hybridllm.entrypoints.openai.state import (
    AppState,
    check_model,
    check_task,
    get_state,
    new_id,
    now,
)
from hybridllm.proto import engine_pb2 as pb
from hybridllm.text.truncation import encode_batch_truncated, special_token_ids, truncate_ids

router = APIRouter()

MAX_INPUTS = 2048
INLINE_TOKENIZE_BYTES = 4096  # tokenized in place below this: a thread hop costs more
_BAD_INPUT = ("input must be a string, a list of strings, a list of token ids, or a list of "
              "token-id lists.")


def _is_id(v: Any) -> bool:
    return type(v) is int


def parse_inputs(value: Any, vocab: int) -> tuple[list[str | list[int]], bool]:
    """The inputs, and whether `input` was a list of them (errors then say input[i])."""
    if isinstance(value, str):
        inputs: list[Any] = [value]
        listed = False
    elif isinstance(value, list):
        if not value:
            raise bad("input must not be empty.", "input")
        if all(_is_id(x) for x in value):
            inputs, listed = [value], False
        elif all(isinstance(x, str) for x in value) or all(isinstance(x, list) for x in value):
            inputs, listed = value, True
        else:
            raise bad(_BAD_INPUT, "input")
    else:
        raise bad(_BAD_INPUT, "input")
    if len(inputs) > MAX_INPUTS:
        raise bad(f"input holds {len(inputs)} inputs; at most {MAX_INPUTS} are allowed per "
                  "request.", "input")
    for i, item in enumerate(inputs):
        where = f"input[{i}]" if listed else "input"
        if isinstance(item, str):
            if not item:
                raise bad(f"{where} must not be an empty string.", "input")
            continue
        if not all(_is_id(t) for t in item):
            raise bad(f"{where} must be a list of token ids (integers).", "input")
        if not item:
            raise bad(f"{where} must not be an empty list of token ids.", "input")
        badid = next((t for t in item if not 0 <= t < vocab), None)
        if badid is not None:
            raise bad(f"{where}: token id {badid} is out of vocabulary (size {vocab}).", "input")
    return inputs, listed


def truncation_limit(req: EmbeddingRequest, max_len: int) -> int | None:
    t = req.truncate_prompt_tokens
    if t is None:
        return None
    if t == -1:
        return max_len
    if t < 1:
        raise bad(f"truncate_prompt_tokens must be -1 (the model's limit) or at least 1, got {t}.",
                  "truncate_prompt_tokens")
    if t > max_len:
        raise bad(f"truncate_prompt_tokens ({t}) is larger than the model's maximum input length "
                  f"of {max_len} tokens.", "truncate_prompt_tokens")
    return t


def check_options(state: AppState, req: EmbeddingRequest) -> None:
    if req.encoding_format not in (None, "float", "base64"):
        raise bad(f"encoding_format must be 'float' or 'base64', got '{req.encoding_format}'.",
                  "encoding_format")
    hidden = state.model_info.hidden_size
    if req.dimensions is not None and req.dimensions != hidden:
        raise bad(f"dimensions ({req.dimensions}) is not supported: this model's embeddings have "
                  f"{hidden} dimensions and it cannot shorten them (not a matryoshka model).",
                  "dimensions")


def token_ids(state: AppState, inputs: list[str | list[int]], limit: int | None,
              special: bool) -> list[list[int]]:
    """Each input's ids as the engine gets them: tokenized, cut to `limit` keeping [CLS]/[SEP]."""
    tok = state.encoder
    out: list[list[int]] = [[] for _ in inputs]
    texts = [i for i, x in enumerate(inputs) if isinstance(x, str)]
    if texts:
        lower = state.model_info.lowercase_inputs
        batch = [inputs[i].lower() if lower else inputs[i] for i in texts]  # type: ignore[union-attr]
        room = limit is None or limit > tok.num_special_tokens_to_add(is_pair=False)
        if special and not room:
            raise bad(f"truncate_prompt_tokens ({limit}) must leave room for at least one token "
                      f"besides the model's {tok.num_special_tokens_to_add(is_pair=False)} "
                      "special tokens.", "truncate_prompt_tokens")
        for i, ids in zip(texts, encode_batch_truncated(tok, batch, [limit] * len(batch), special)):
            out[i] = ids
    specials = special_token_ids(tok)
    for i, x in enumerate(inputs):
        if not isinstance(x, str):
            out[i] = truncate_ids(x, limit, specials)
    return out


def check_lengths(ids: list[list[int]], listed: bool, max_len: int) -> None:
    for i, x in enumerate(ids):
        where = f"input[{i}]" if listed else "input"
        if not x:
            raise bad(f"{where} has no tokens after tokenization.", "input")
        if len(x) > max_len:
            raise bad(f"{where} has {len(x)} tokens, more than the model's maximum input length "
                      f"of {max_len} tokens; pass truncate_prompt_tokens to truncate it.", "input")


@router.post("/v1/embeddings")
async def embeddings(request: Request) -> Response:
    state = get_state(request)
    req = await read_request(request, EmbeddingRequest, state.options.max_request_body_bytes)
    check_model(state, req.model)
    check_task(state, "Embeddings", embed=True)
    check_options(state, req)
    limit = truncation_limit(req, state.max_model_len)
    inputs, listed = parse_inputs(req.input, state.vocab_size)
    special = True if req.add_special_tokens is None else req.add_special_tokens
    text_bytes = sum(len(x) for x in inputs if isinstance(x, str))
    if text_bytes <= INLINE_TOKENIZE_BYTES:
        ids = token_ids(state, inputs, limit, special)
    else:  # off the event loop: 2,048 long texts take a while
        ids = await asyncio.to_thread(token_ids, state, inputs, limit, special)
    check_lengths(ids, listed, state.max_model_len)
    embed = pb.EmbedRequest(request_id=new_id("embd"),
                            inputs=[pb.EmbedInput(token_ids=x) for x in ids])
    if req.normalize is not None:
        embed.normalize = req.normalize
    try:
        reply = await unless_disconnected(request, state.engine.embed(embed))
    except EngineCallError as e:
        raise from_engine(e.code, e.message) from None
    except ClientDisconnected:
        return Response(status_code=499)  # nobody is left to read it
    b64 = req.encoding_format == "base64"
    data = []
    for i, e in enumerate(reply.embeddings):
        vec = np.array(e.values, dtype="<f4")
        data.append({"index": i, "object": "embedding",
                     "embedding": base64.b64encode(vec.tobytes()).decode() if b64 else vec})
    n = sum(len(x) for x in ids)
    body = {"id": embed.request_id, "object": "list", "created": now(),
            "model": state.served_names[0], "data": data,
            "usage": {"prompt_tokens": n, "total_tokens": n, "completion_tokens": 0,
                      "prompt_tokens_details": None}}
    return Response(orjson.dumps(body, option=orjson.OPT_SERIALIZE_NUMPY),
                    media_type="application/json")
