"""Request bodies: pydantic models of the Rust frontend's serde structs, and a body read into
one the way the Rust frontend reads it (openai/mod.rs JsonBody): 413 over the size limit, 400
for invalid JSON or no JSON object, 400 naming in `param` the first mistyped field."""

from __future__ import annotations

from typing import Annotated, Any, TypeVar

import orjson
from pydantic import BaseModel, ConfigDict, Field
from pydantic import ValidationError as PydanticError
from starlette.requests import Request

from hybridllm.entrypoints.openai.errors import ApiError, bad
from hybridllm.entrypoints.openai.limits import check_json_content_type

I64 = Annotated[int, Field(strict=True, ge=-(1 << 63), lt=1 << 63)]
U32 = Annotated[int, Field(strict=True, ge=0, lt=1 << 32)]
MAX_DEPTH = 127  # arrays/objects nested deeper fail in serde_json (orjson takes 1024)


class Struct(BaseModel):
    """serde's types: nothing is coerced (1 is no bool, 1.0 no integer); unknown fields are
    ignored; null is the same as absent for optional fields."""

    model_config = ConfigDict(strict=True)


class SamplingRequest(Struct):
    """The sampling fields of both generation endpoints (validation.rs)."""

    n: I64 | None = None
    best_of: I64 | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: I64 | None = None
    min_p: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    repetition_penalty: float | None = None
    seed: I64 | None = None
    max_tokens: I64 | None = None
    max_completion_tokens: I64 | None = None
    min_tokens: I64 | None = None
    stop: Any = None
    stop_token_ids: list[U32] | None = None
    ignore_eos: bool | None = None
    logit_bias: dict[str, float] | None = None
    skip_special_tokens: bool | None = None
    spaces_between_special_tokens: bool | None = None
    include_stop_str_in_output: bool | None = None
    prompt_logprobs: I64 | None = None
    use_beam_search: bool | None = None
    length_penalty: float | None = None


class TemplateArgs(Struct):
    """Chat-template inputs (chat.rs TemplateArgs), shared with /tokenize."""

    tools: Any = None
    documents: Any = None
    add_generation_prompt: bool | None = None
    continue_final_message: bool | None = None
    chat_template: str | None = None
    chat_template_kwargs: dict[str, Any] | None = None


class StreamOptions(Struct):
    include_usage: bool = False


class ChatCompletionRequest(SamplingRequest, TemplateArgs):  # both groups serde(flatten)ed
    model: str | None = None
    messages: list[Any]
    logprobs: bool | None = None
    top_logprobs: I64 | None = None
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    add_special_tokens: bool | None = None


class CompletionRequest(SamplingRequest):
    model: str | None = None
    prompt: Any  # a string, strings, token ids or lists of them (checked by the handler)
    logprobs: I64 | None = None
    echo: bool | None = None
    suffix: str | None = None
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    add_special_tokens: bool | None = None


class TokenizeRequest(TemplateArgs):
    model: str | None = None
    prompt: str | None = None
    messages: list[Any] | None = None
    add_special_tokens: bool | None = None


class EmbeddingRequest(Struct):
    model: str | None = None
    input: Any  # a string, strings, token ids or lists of them (checked by the handler)
    encoding_format: str | None = None
    dimensions: I64 | None = None
    user: str | None = None
    truncate_prompt_tokens: I64 | None = None
    add_special_tokens: bool | None = None
    normalize: bool | None = None


class ResponsesRequest(Struct):
    """POST /v1/responses (responses/input.rs)."""

    model: str | None = None
    input: Any  # a string or a list of input items (checked by the handler)
    instructions: str | None = None
    max_output_tokens: I64 | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: I64 | None = None  # vLLM's sampling extensions, as on chat completions
    min_p: float | None = None
    repetition_penalty: float | None = None
    seed: I64 | None = None
    stop: Any = None
    ignore_eos: bool | None = None
    stream: bool | None = None
    store: bool | None = None
    previous_response_id: str | None = None
    metadata: dict[str, Any] | None = None
    user: str | None = None
    truncation: str | None = None
    # Refused unless in their text-only form, never ignored.
    background: bool | None = None
    tools: list[Any] | None = None
    tool_choice: Any = None
    reasoning: Any = None
    text: Any = None
    include: list[Any] | None = None
    top_logprobs: I64 | None = None
    prompt: Any = None
    conversation: Any = None


class DetokenizeRequest(Struct):
    model: str | None = None
    tokens: list[U32]


R = TypeVar("R", bound=Struct)


async def read_request(request: Request, cls: type[R], limit: int) -> R:
    check_json_content_type(request.headers.get("content-type"))
    too_large = ApiError(413, f"Request body is larger than the limit of {limit} bytes.")
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise too_large
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise too_large
    return parse_body(cls, bytes(body))


def parse_body(cls: type[R], body: bytes) -> R:
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError as e:
        raise bad(f"Invalid JSON body: {e}") from None
    if _too_deep(value, MAX_DEPTH):
        raise bad(f"Invalid JSON body: arrays and objects nested more than {MAX_DEPTH} deep")
    if not isinstance(value, dict):
        raise bad("Invalid request: the body must be a JSON object.")
    try:
        return cls.model_validate(value)
    except PydanticError as e:
        errors = e.errors()
    # The first mistyped field in body order is `param`; else a missing one, `param` null.
    mistyped = [x for x in errors if x["type"] != "missing"]
    if not mistyped:
        raise bad(f"Invalid request: {errors[0]['loc'][0]}: {errors[0]['msg']}")
    first = min(mistyped, key=lambda x: list(value).index(x["loc"][0]))
    where = ".".join(map(str, first["loc"]))
    raise bad(f"Invalid request: {where}: {first['msg']}", first["loc"][0])


def _too_deep(v: Any, levels: int) -> bool:
    if not isinstance(v, (dict, list)):
        return False
    return levels == 0 or any(_too_deep(x, levels - 1) for x in
                              (v.values() if isinstance(v, dict) else v))

