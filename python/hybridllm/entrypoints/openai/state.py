"""What every handler needs: serve options, the engine, the text pipeline, model facts."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from starlette.requests import Request

from hybridllm import _api
from hybridllm.entrypoints.rust_frontend import ServeOptions
from hybridllm.proto import engine_pb2 as pb
from hybridllm.server.engine_client import EngineClient


@dataclass
class AppState:
    options: ServeOptions
    engine: EngineClient
    api: _api.Context  # what the core's rules need (chat, completions)
    tokenizer: _api.Tokenizer  # the core's: prompts and text, as the Rust frontend's
    model_info: pb.ModelInfo
    metrics: _api.Metrics  # the core's families, as the Rust frontend serves them
    auth: _api.Auth  # who may call what (the core's rule)
    responses: _api.ResponseStore  # /v1/responses objects created with store: true
    created: int = field(default_factory=lambda: int(time.time()))
    # The tasks running background responses, by response id (a cancel cancels its task).
    background: dict[str, asyncio.Task[None]] = field(default_factory=dict)


def get_state(request: Request) -> AppState:
    return request.app.state.hybridllm
