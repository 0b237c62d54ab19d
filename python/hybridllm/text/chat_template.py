"""Chat prompts: OpenAI messages rendered in transformers' own Jinja2 sandbox (the reference
the Rust frontend's minijinja renderer is tested against), with transformers' message
normalisation and continue_final_message rules. Used by the offline `LLM.chat` and the Python
HTTP frontend alike."""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

CONTINUE_TAG = "CONTINUE_FINAL_MESSAGE_TAG "
_REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")


class ChatTemplateError(ValueError):
    """The template refused the conversation (raise_exception, an incompatible option...)."""


class InvalidTemplateError(ChatTemplateError):
    """The template does not compile."""


class InvalidMessagesError(ChatTemplateError):
    """The messages are not a list of {role, content} objects with text content."""


@lru_cache(maxsize=16)
def compile_template(source: str) -> Any:
    import jinja2
    from transformers.utils.chat_template_utils import _compile_jinja_template

    source = source.replace("\r\n", "\n").replace("\r", "\n")
    try:
        return _compile_jinja_template(source)
    except jinja2.TemplateSyntaxError as e:
        raise InvalidTemplateError(f"invalid chat template: {e.message} (line {e.lineno})") from e


def prepare_messages(messages: list[Any]) -> list[dict[str, Any]]:
    """Content parts become one string (text parts joined by newlines); tool-call arguments
    given as JSON text become objects, as vLLM does, so templates can iterate them."""
    if not messages:
        raise InvalidMessagesError("messages must contain at least one message.")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise InvalidMessagesError(f"messages[{i}] must be an object.")
        m = dict(m)
        if not isinstance(m.get("role"), str):
            raise InvalidMessagesError(f"messages[{i}].role must be a string.")
        if isinstance(m.get("content"), list):
            texts = []
            for p in m["content"]:
                typ = p.get("type") if isinstance(p, dict) else None
                typ = typ if isinstance(typ, str) else None
                text = p.get("text") if isinstance(p, dict) else None
                if not isinstance(text, str) or typ not in ("text", None):
                    raise InvalidMessagesError(
                        f"messages[{i}]: content part type {typ or '<missing>'} is not "
                        "supported (text only).")
                texts.append(text)
            m["content"] = "\n".join(texts)
        if isinstance(m.get("tool_calls"), list):
            m["tool_calls"] = [_parse_arguments(c) for c in m["tool_calls"]]
        out.append(m)
    return out


def _parse_arguments(call: Any) -> Any:
    fn = call.get("function") if isinstance(call, dict) else None
    if not isinstance(fn, dict) or not isinstance(fn.get("arguments"), str):
        return call
    try:
        parsed = json.loads(fn["arguments"])
    except ValueError:
        return call
    if not isinstance(parsed, dict):
        return call
    return {**call, "function": {**fn, "arguments": parsed}}


def _normalize(m: dict[str, Any]) -> dict[str, Any]:
    """Null fields dropped; reasoning aliased under `thinking`/`reasoning_content`."""
    m = {k: v for k, v in m.items() if v is not None}
    r = next((m[k] for k in _REASONING_FIELDS if k in m), None)
    return m if r is None else {"thinking": r, **m, "reasoning_content": r}


def _tag_final(messages: list[dict[str, Any]], source: str) -> str:
    """Marks the end of the final message's text; returns that text."""
    last = messages[-1]
    if "content" not in last:
        raise ChatTemplateError('continue_final_message is set but the final message has no '
                                '"content" to continue!')
    if "content" not in source:
        raise ChatTemplateError('continue_final_message is set to "content" but this is not an '
                                "accepted field in the chat_template")
    content = last["content"]
    if isinstance(content, str):
        last["content"] = content + CONTINUE_TAG
        return content
    if isinstance(content, list):
        for p in reversed(content):
            if isinstance(p, dict) and isinstance(p.get("text"), str):
                orig = p["text"]
                p["text"] = orig + CONTINUE_TAG
                return orig
        raise ChatTemplateError("continue_final_message is set but we could not find any text "
                                "to continue in the final message!")
    raise ChatTemplateError('continue_final_message is set but the final message has no '
                            '"content" to continue!')


def _cut(rendered: str, final: str) -> str:
    tag = CONTINUE_TAG.strip()
    if final.strip() not in rendered or tag not in rendered:
        raise ChatTemplateError(
            "continue_final_message is set but the final message does not appear in the chat "
            "after applying the chat template! This can happen if the chat template deletes "
            "portions of the final message. Please verify the chat template and final message in "
            "your chat to ensure they are compatible.Final message to continue: "
            f"{final.strip()}")
    loc = rendered.rindex(tag)
    if rendered[loc:].startswith(CONTINUE_TAG):
        return rendered[:loc]
    return rendered[:loc].rstrip()


def render_chat(
    source: str,
    messages: list[Any],
    *,
    add_generation_prompt: bool = False,
    continue_final_message: bool = False,
    tools: Any = None,
    documents: Any = None,
    bos_token: str | None = None,
    eos_token: str | None = None,
    extra: dict[str, Any] | None = None,
) -> str:
    """The prompt text; every refusal is a ChatTemplateError (its subclasses say whose fault:
    the template's or the messages')."""
    template = compile_template(source)
    msgs = prepare_messages(messages)
    if continue_final_message and add_generation_prompt:
        raise ChatTemplateError(
            "continue_final_message and add_generation_prompt are not compatible. Use "
            "continue_final_message when you want the model to continue the final message, "
            "and add_generation_prompt when you want to add a header that will prompt it to "
            "start a new assistant message instead.")
    msgs = [_normalize(m) for m in msgs]
    final = _tag_final(msgs, source) if continue_final_message else None
    context: dict[str, Any] = {
        "messages": msgs, "tools": tools, "documents": documents,
        "add_generation_prompt": add_generation_prompt, "bos_token": bos_token or "",
        "eos_token": eos_token or "", **(extra or {}),  # extra may override the defaults
    }
    try:
        rendered = template.render(**context)
    except Exception as e:  # noqa: BLE001 - raise_exception, undefined names, type errors...
        raise ChatTemplateError(str(e)) from e
    return _cut(rendered, final) if final is not None else rendered
