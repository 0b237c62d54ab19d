"""The /v1/responses request checked (responses/input.rs): the fields served only in their
text-only form, truncation, metadata, the sampling fields, and the input items read into
stored items and chat messages. Messages and order of checks are the Rust frontend's."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any

from hybridllm.entrypoints.openai.errors import bad
from hybridllm.entrypoints.openai.protocol import ResponsesRequest, SamplingRequest

METADATA_KEYS, METADATA_KEY_CHARS, METADATA_VALUE_CHARS = 16, 64, 512
ROLES = ("user", "system", "developer", "assistant")
U32_MAX = (1 << 32) - 1


def new_item_id() -> str:
    return f"msg_{uuid.uuid4().hex}"


def check_unsupported(req: ResponsesRequest) -> None:
    """Tools, reasoning, background runs, structured text and extra output are not served."""
    if req.background is True:
        raise bad("background is not supported: responses are created in the foreground "
                  "(background must be false).", "background")
    if req.tools:
        raise bad("tools is not supported: only text responses are served (tools must be "
                  "empty).", "tools")
    if req.tool_choice is not None and req.tool_choice not in ("auto", "none"):
        raise bad('tool_choice is not supported: no tools are served (tool_choice must be "auto" '
                  'or "none").', "tool_choice")
    if req.reasoning is not None:
        raise bad("reasoning is not supported: the model has no reasoning options (reasoning "
                  "must be null).", "reasoning")
    if req.text is not None:
        fmt = req.text.get("format") if isinstance(req.text, dict) else False
        if fmt is not None and not (isinstance(fmt, dict) and fmt.get("type") == "text"):
            raise bad('text.format is not supported: only {"type": "text"} is served.', "text")
    if req.include:
        raise bad("include is not supported: no extra output is available (include must be "
                  "empty).", "include")
    if req.top_logprobs is not None and req.top_logprobs != 0:
        raise bad("top_logprobs is not supported on /v1/responses (it must be 0).",
                  "top_logprobs")
    if req.prompt is not None:
        raise bad("prompt is not supported: stored prompt templates are not available (use "
                  "input).", "prompt")
    if req.conversation is not None:
        raise bad("conversation is not supported: use previous_response_id to continue a "
                  "conversation.", "conversation")


def truncation_auto(req: ResponsesRequest) -> bool:
    """`truncation: "auto"` drops the oldest turns of a prompt that does not fit."""
    if req.truncation in (None, "disabled", "auto"):
        return req.truncation == "auto"
    raise bad(f'truncation must be "auto" or "disabled", got {quote_json(req.truncation)}.',
              "truncation")


def check_metadata(req: ResponsesRequest) -> None:
    """OpenAI's limits: 16 string values, keys up to 64 characters, values up to 512."""
    m = req.metadata
    if m is None:
        return
    if len(m) > METADATA_KEYS:
        raise bad(f"metadata must have at most {METADATA_KEYS} keys, got {len(m)}.", "metadata")
    for k, v in m.items():
        if len(k) > METADATA_KEY_CHARS:
            raise bad(f"metadata keys must be at most {METADATA_KEY_CHARS} characters, got "
                      f"{len(k)}.", "metadata")
        if not isinstance(v, str):
            raise bad("metadata values must be strings.", "metadata")
        if len(v) > METADATA_VALUE_CHARS:
            raise bad(f"metadata values must be at most {METADATA_VALUE_CHARS} characters, got "
                      f"{len(v)}.", "metadata")


def sampling(req: ResponsesRequest, limit: int | None) -> SamplingRequest:
    """The sampling fields as chat completions reads them; max_output_tokens checked here so
    that its errors name it."""
    m = req.max_output_tokens
    if m is not None:
        if not 1 <= m <= U32_MAX:
            raise bad(f"max_output_tokens must be in [1, {U32_MAX}], got {m}.",
                      "max_output_tokens")
        if limit is not None and m > limit:
            raise bad(f"max_output_tokens must be at most {limit} (the server's "
                      f"--max-tokens-limit), got {m}.", "max_output_tokens")
    return SamplingRequest(temperature=req.temperature, top_p=req.top_p, top_k=req.top_k,
                           min_p=req.min_p, repetition_penalty=req.repetition_penalty,
                           seed=req.seed, stop=req.stop, ignore_eos=req.ignore_eos,
                           max_tokens=m)


@dataclass
class Input:
    items: list[dict[str, Any]] = field(default_factory=list)  # stored, with ids
    messages: list[dict[str, Any]] = field(default_factory=list)  # for the chat template


def read_input(value: Any) -> Input:
    """A string is one user message; a list holds messages ({"role", "content"}, optionally
    "type": "message") whose content is a string or text parts."""
    if isinstance(value, str):
        return _one("user", [(_part_type("user"), value)])
    if isinstance(value, list) and not value:
        raise bad("input must not be empty.", "input")
    if not isinstance(value, list):
        raise bad("input must be a string or a list of input items.", "input")
    out = Input()
    for i, item in enumerate(value):
        if not isinstance(item, dict):
            raise bad(f"input[{i}] must be an object.", "input")
        kind = item.get("type")  # null is the same as absent
        if kind is not None and kind != "message":
            shown = quote_json(kind) if isinstance(kind, str) else "<not a string>"
            raise bad(f"input[{i}]: item type {shown} is not supported (only messages).",
                      "input")
        role = item.get("role")
        if role not in ROLES:
            raise bad(f"input[{i}].role must be one of user, system, developer, assistant.",
                      "input")
        content = item.get("content")
        if isinstance(content, str):
            parts = [(_part_type(role), content)]
        elif isinstance(content, list):
            parts = []
            for j, p in enumerate(content):
                t = p.get("type") if isinstance(p, dict) else None
                text = p.get("text") if isinstance(p, dict) else None
                if t not in ("input_text", "output_text") or not isinstance(text, str):
                    shown = quote_json(t) if isinstance(t, str) else "<missing>"
                    raise bad(f"input[{i}].content[{j}]: content part type {shown} is not "
                              "supported (text only).", "input")
                parts.append((t, text))
        else:
            raise bad(f"input[{i}].content must be a string or a list of content parts.",
                      "input")
        one = _one(role, parts)
        out.items += one.items
        out.messages += one.messages
    return out


def _part_type(role: str) -> str:
    """What a plain string becomes: the assistant's own words are output text."""
    return "output_text" if role == "assistant" else "input_text"


def _one(role: str, parts: list[tuple[str, str]]) -> Input:
    content = [{"type": t, "text": text, **({"annotations": []} if t == "output_text" else {})}
               for t, text in parts]
    # Templates know system, not OpenAI's newer name for it.
    template_role = "system" if role == "developer" else role
    return Input(
        items=[{"id": new_item_id(), "type": "message", "role": role, "content": content,
                "status": "completed"}],
        messages=[{"role": template_role, "content": "\n".join(t for _, t in parts)}],
    )


def quote_json(s: str) -> str:
    """A string quoted as the Rust frontend's json!(s) writes it in a message."""
    return json.dumps(s, ensure_ascii=False)
