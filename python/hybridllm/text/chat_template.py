"""Chat templates rendered in a Jinja2 sandbox configured the way transformers configures it."""

from __future__ import annotations

import json
from datetime import datetime
from functools import lru_cache
from typing import Any

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


class ChatTemplateError(ValueError):
    """The template does not compile, or raised while rendering (raise_exception)."""


def _raise_exception(message: str) -> None:
    raise ChatTemplateError(message)


def _tojson(
    value: Any, ensure_ascii: bool = False, indent: int | None = None,
    separators: tuple[str, str] | None = None, sort_keys: bool = False,
) -> str:
    # No HTML escaping, unlike Jinja's built-in tojson.
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


@lru_cache(maxsize=16)
def compile_template(source: str) -> jinja2.Template:
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols]
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    try:
        return env.from_string(source)
    except jinja2.TemplateSyntaxError as e:
        raise ChatTemplateError(f"chat template is invalid: {e.message} (line {e.lineno})") from e


def _final_text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        for part in reversed(content):
            if isinstance(part, dict) and "text" in part:
                return part["text"]
        raise ChatTemplateError("continue_final_message: the final message has no text part")
    return content or ""


def render_chat(
    source: str,
    messages: list[dict[str, Any]],
    *,
    add_generation_prompt: bool = False,
    continue_final_message: bool = False,
    tools: list[dict[str, Any]] | None = None,
    bos_token: str | None = None,
    eos_token: str | None = None,
    extra: dict[str, Any] | None = None,
) -> str:
    if add_generation_prompt and continue_final_message:
        raise ChatTemplateError(
            "continue_final_message and add_generation_prompt cannot both be true."
        )
    template = compile_template(source)
    context: dict[str, Any] = dict(extra or {})
    context.update(
        messages=messages, tools=tools, add_generation_prompt=add_generation_prompt,
        bos_token=bos_token or "", eos_token=eos_token or "",
    )
    try:
        rendered = template.render(**context)
    except ChatTemplateError:
        raise
    except jinja2.TemplateError as e:
        raise ChatTemplateError(f"chat template failed to render: {e}") from e
    if continue_final_message and messages:
        final = _final_text(messages[-1]).strip()
        if final not in rendered:
            raise ChatTemplateError(
                "continue_final_message is set but the final message does not appear in the "
                "rendered chat."
            )
        rendered = rendered[: rendered.rindex(final) + len(final)]
    return rendered
