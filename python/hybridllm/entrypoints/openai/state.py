"""What every handler needs: serve options, the engine, the text pipeline, model facts."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field

from starlette.requests import Request
from tokenizers import Tokenizer as HfTokenizer

from hybridllm import _api
from hybridllm.entrypoints.engine_client import EngineClient
from hybridllm.entrypoints.openai.errors import ApiError
from hybridllm.entrypoints.openai.metrics import Metrics
from hybridllm.entrypoints.openai.responses_store import ResponseStore
from hybridllm.entrypoints.rust_frontend import ServeOptions
from hybridllm.proto import engine_pb2 as pb


@dataclass
class AppState:
    options: ServeOptions
    engine: EngineClient
    tokenizer: _api.Tokenizer  # the core's: prompts and text, as the Rust frontend's
    encoder: HfTokenizer  # the same file through `tokenizers`: batch-encodes embedding inputs
    template: _api.ChatTemplate | None
    model_info: pb.ModelInfo
    served_names: list[str]
    max_model_len: int
    vocab_size: int
    metrics: Metrics
    responses: ResponseStore  # /v1/responses objects created with store: true
    created: int = field(default_factory=lambda: int(time.time()))


def now() -> int:
    return int(time.time())


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


def check_model(state: AppState, model: str | None) -> None:
    """An omitted/null model is allowed; any other name must be one of the served names."""
    if model is not None and model not in state.served_names:
        raise ApiError(404, f"The model `{model}` does not exist.")


def get_state(request: Request) -> AppState:
    return request.app.state.hybridllm


def check_task(state: AppState, api: str, embed: bool) -> None:
    """An endpoint the model cannot serve: 400 naming the model's task (vLLM's answer)."""
    is_embed = state.model_info.kind == pb.ModelInfo.EMBED
    if is_embed != embed:
        task = "embed" if is_embed else "generate"
        kind = "an embedding" if is_embed else "a generative"
        raise ApiError(400, f"The model does not support the {api} API: `{state.served_names[0]}` "
                            f"is {kind} model (task '{task}').")
