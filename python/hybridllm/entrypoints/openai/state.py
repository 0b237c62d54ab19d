"""What every handler needs: serve options, the engine, the text pipeline, model facts."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from hybridllm.entrypoints.engine_client import EngineClient
from hybridllm.entrypoints.openai.errors import model_not_found
from hybridllm.entrypoints.openai.metrics import Metrics
from hybridllm.proto import engine_pb2 as pb
from hybridllm.text.tokenizer import Tokenizer


@dataclass
class ServeOptions:
    """The `--args-json` schema of the Rust frontend (rust-frontend/src/config.rs)."""

    served_model_name: list[str] = field(default_factory=list)
    max_model_len: int | None = None
    api_keys: list[str] = field(default_factory=list)
    allowed_origins: list[str] = field(default_factory=lambda: ["*"])
    allowed_methods: list[str] = field(default_factory=lambda: ["*"])
    allowed_headers: list[str] = field(default_factory=lambda: ["*"])
    allow_credentials: bool = False
    max_request_body_bytes: int = 32 << 20
    chat_template: str | None = None  # a path
    tokenizer_path: str | None = None
    max_log_len: int = 0
    engine_connect_timeout_s: float = 60.0
    disable_log_requests: bool = False
    shutdown_timeout_s: float = 30.0

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ServeOptions:
        names = set(cls.__dataclass_fields__)
        unknown = sorted(set(d) - names)
        if unknown:  # same strictness as serde(deny_unknown_fields)
            raise ValueError(f"unknown serve option(s): {', '.join(unknown)}")
        d = dict(d)
        smn = d.get("served_model_name")
        d["served_model_name"] = [smn] if isinstance(smn, str) else list(smn or [])
        return cls(**d)


@dataclass
class AppState:
    options: ServeOptions
    engine: EngineClient
    tokenizer: Tokenizer
    template: str | None  # chat template source (compiled lazily, cached)
    model_info: pb.ModelInfo
    served_names: list[str]
    max_model_len: int
    vocab_size: int
    metrics: Metrics
    created: int = field(default_factory=lambda: int(time.time()))


def now() -> int:
    return int(time.time())


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


def check_model(state: AppState, model: str | None) -> None:
    """An omitted/null model is allowed; any other name must be one of the served names."""
    if model is not None and model not in state.served_names:
        raise model_not_found(model)
