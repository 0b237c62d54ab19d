"""Request bodies: pydantic models of the Rust frontend's serde structs, and a body read into
one the way the Rust frontend reads it (openai/mod.rs JsonBody): 413 over the size limit, 400
for invalid JSON, 400 naming in `param` the field serde names for a mistyped one."""

from __future__ import annotations

from typing import Annotated, Any, TypeVar

import orjson
from pydantic import AfterValidator, BaseModel, ConfigDict, Discriminator, Field, Tag
from pydantic import ValidationError as PydanticError
from starlette.requests import Request

from hybridllm.entrypoints.openai.errors import ApiError, bad, too_large

I64 = Annotated[int, Field(strict=True, ge=-(1 << 63), lt=1 << 63)]
U32 = Annotated[int, Field(strict=True, ge=0, lt=1 << 32)]
MAX_DEPTH = 127  # arrays/objects nested deeper fail in serde_json (orjson takes 1024)


class Struct(BaseModel):
    """serde's types: nothing is coerced (1 is no bool, 1.0 no integer); unknown fields are
    ignored; null is the same as absent for optional fields."""

    model_config = ConfigDict(strict=True)


class SamplingRequest(Struct):
    """The sampling fields of both generation endpoints, in validation.rs's order (which
    counts: serde reads a sequence given for them as these fields in order)."""

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


class TemplateArgs(Struct):
    """Chat-template inputs (chat.rs TemplateArgs), shared with /tokenize."""

    tools: Any = None
    documents: Any = None
    add_generation_prompt: bool | None = None
    continue_final_message: bool | None = None
    chat_template: str | None = None
    chat_template_kwargs: dict[str, Any] | None = None


# The groups' fields are serde(flatten)ed into requests, never a request's own.
_FLATTENED = {*SamplingRequest.model_fields, *TemplateArgs.model_fields}


class StreamOptions(Struct):
    include_usage: bool = False


def _at_most_one(v: list[bool]) -> list[bool]:
    if len(v) > 1:
        raise ValueError(f"expected at most 1 element, got {len(v)}")
    return v


# serde also reads a struct from the sequence of its fields: `"stream_options": [true]`.
StreamOptionsArg = Annotated[
    Annotated[StreamOptions, Tag("struct")]
    | Annotated[list[bool], AfterValidator(_at_most_one), Tag("seq")],
    Discriminator(lambda v: "seq" if isinstance(v, list) else "struct"),
]


def include_usage(o: StreamOptions | list[bool] | None) -> bool:
    return o.include_usage if isinstance(o, StreamOptions) else bool(o and o[0])


class ChatCompletionRequest(SamplingRequest, TemplateArgs):  # both groups serde(flatten)ed
    model: str | None = None
    messages: list[Any]
    logprobs: bool | None = None
    top_logprobs: I64 | None = None
    stream: bool | None = None
    stream_options: StreamOptionsArg | None = None
    add_special_tokens: bool | None = None


class CompletionRequest(SamplingRequest):
    model: str | None = None
    prompt: Any  # a string, strings, token ids or lists of them (checked by the handler)
    logprobs: I64 | None = None
    echo: bool | None = None
    suffix: str | None = None
    stream: bool | None = None
    stream_options: StreamOptionsArg | None = None
    add_special_tokens: bool | None = None


class TokenizeRequest(TemplateArgs):
    model: str | None = None
    prompt: str | None = None
    messages: list[Any] | None = None
    add_special_tokens: bool | None = None


class DetokenizeRequest(Struct):
    model: str | None = None
    tokens: list[U32]


R = TypeVar("R", bound=Struct)


async def read_request(request: Request, cls: type[R], limit: int) -> R:
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise too_large(limit)
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise too_large(limit)
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError as e:
        raise bad(f"Invalid JSON body: {e}") from None
    if _too_deep(value, MAX_DEPTH):
        raise bad(f"Invalid JSON body: arrays and objects nested more than {MAX_DEPTH} deep")
    try:
        return cls.model_validate(value)
    except PydanticError as e:
        raise request_error(cls, value, e) from None


def _too_deep(v: Any, levels: int) -> bool:
    items = v.values() if isinstance(v, dict) else v if isinstance(v, list) else None
    if items is None:
        return False
    return levels == 0 or any(_too_deep(x, levels - 1) for x in items
                              if isinstance(x, (dict, list)))


def request_error(cls: type[Struct], value: Any, e: PydanticError) -> ApiError:
    """The field serde reports first (JsonBody): a mistyped field of the request itself, in
    body order; else, as serde loses the path inside flattened groups and JsonBody re-reads
    them alone, the first mistyped sampling field, else template field (whatever the
    endpoint); else none (`param` null): the body is no object, or a field is missing."""
    first = None
    if isinstance(value, dict):
        first = _first(e, list(value), cls.model_fields.keys() - _FLATTENED)
    for group in (SamplingRequest, TemplateArgs) if first is None else ():
        failed, first = _group_error(group, value)
        if failed:
            break
    if first is None:
        err = next((x for x in e.errors() if x["type"] == "missing"), e.errors()[0])
        where = f"{path_of(err['loc'])}: " if err["loc"] else ""
        return bad(f"Invalid request: {where}{err['msg']}")
    path = path_of(first["loc"])
    return bad(f"Invalid request: {path}: {first['msg']}", path)


def _first(e: PydanticError, order: list[Any], fields: Any) -> Any:
    errors = [x for x in e.errors() if x["loc"] and x["loc"][0] in fields
              and x["type"] != "missing"]
    return min(errors, key=lambda x: order.index(x["loc"][0]), default=None)


def _group_error(group: type[Struct], value: Any) -> tuple[bool, Any]:
    """Reads `value` as `group` alone: whether that fails, and the error if it names a field.
    A sequence is read as the group's fields in order (serde allows that for structs)."""
    names = list(group.model_fields)
    seq = isinstance(value, list)
    data = dict(zip(names, value)) if seq else value
    try:
        group.model_validate(data)
    except PydanticError as e:
        first = _first(e, list(data) if isinstance(data, dict) else [], names)
        if seq and first is not None:
            first = {**first, "loc": (names.index(first["loc"][0]), *first["loc"][1:])}
        return True, first
    return seq and len(value) != len(names), None  # serde: "invalid length", no field


def path_of(loc: tuple[Any, ...]) -> str:
    """serde_path_to_error's form: `stop_token_ids[0]`, `stream_options.include_usage`."""
    if loc[:1] == ("stream_options",):
        loc = loc[:1] + loc[2:]  # the StreamOptionsArg tag ("struct" or "seq") is no field
    out = ""
    for seg in loc:
        out += f"[{seg}]" if isinstance(seg, int) else f".{seg}" if out else str(seg)
    return out
