"""Chat prompts: OpenAI messages prepared like chat.rs, rendered in transformers' own Jinja2
sandbox (the reference the Rust minijinja renderer is tested against) with the Rust side's
continue_final_message and message-normalisation rules."""

from __future__ import annotations

import json
from typing import Any

from hybridllm.entrypoints.openai.errors import bad
from hybridllm.entrypoints.openai.state import AppState

CONTINUE_TAG = "CONTINUE_FINAL_MESSAGE_TAG "
_REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")
TEMPLATE_SCHEMA: list[tuple[str, Any, bool]] = [
    ("tools", "any", False), ("documents", "any", False), ("add_generation_prompt", "bool", False),
    ("continue_final_message", "bool", False), ("chat_template", "str", False),
    ("chat_template_kwargs", ("map", "any"), False),
]


def compile_template(source: str) -> Any:
    """Raises ValueError("invalid chat template: ...") when the template does not compile."""
    import jinja2
    from transformers.utils.chat_template_utils import _compile_jinja_template

    source = source.replace("\r\n", "\n").replace("\r", "\n")
    try:
        return _compile_jinja_template(source)
    except jinja2.TemplateSyntaxError as e:
        raise ValueError(f"invalid chat template: {e.message} (line {e.lineno})") from e


def prepare_messages(messages: list[Any]) -> list[Any]:
    """Content parts become one string (text parts joined by newlines); tool-call arguments
    given as JSON text become objects, as vLLM does, so templates can iterate them."""
    if not messages:
        raise bad("messages must contain at least one message.", "messages")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise bad(f"messages[{i}] must be an object.", "messages")
        m = dict(m)
        if not isinstance(m.get("role"), str):
            raise bad(f"messages[{i}].role must be a string.", "messages")
        if isinstance(m.get("content"), list):
            texts = []
            for p in m["content"]:
                typ = p.get("type") if isinstance(p, dict) else None
                typ = typ if isinstance(typ, str) else None
                text = p.get("text") if isinstance(p, dict) else None
                if isinstance(text, str) and typ in ("text", None):
                    texts.append(text)
                else:
                    raise bad(f"messages[{i}]: content part type {typ or '<missing>'} is not "
                              "supported (text only).", "messages")
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


def _normalize(messages: list[Any]) -> list[Any]:
    """Null fields dropped; reasoning aliased under `thinking`/`reasoning_content`."""
    out = []
    for m in messages:
        m = {k: v for k, v in m.items() if v is not None}
        r = next((m[k] for k in _REASONING_FIELDS if k in m), None)
        if r is not None:
            m = {"thinking": r, **m, "reasoning_content": r}
        out.append(m)
    return out


def _tag_final(messages: list[Any], source: str) -> str:
    last = messages[-1]
    if "content" not in last:
        raise ValueError('continue_final_message is set but the final message has no "content" '
                         "to continue!")
    if "content" not in source:
        raise ValueError('continue_final_message is set to "content" but this is not an '
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
        raise ValueError("continue_final_message is set but we could not find any text to "
                         "continue in the final message!")
    raise ValueError('continue_final_message is set but the final message has no "content" to '
                     "continue!")


def _cut(rendered: str, final: str) -> str:
    tag = CONTINUE_TAG.strip()
    if final.strip() not in rendered or tag not in rendered:
        raise ValueError(
            "continue_final_message is set but the final message does not appear in the chat "
            "after applying the chat template! This can happen if the chat template deletes "
            "portions of the final message. Please verify the chat template and final message in "
            "your chat to ensure they are compatible.Final message to continue: "
            f"{final.strip()}")
    loc = rendered.rindex(tag)
    if rendered[loc:].startswith(CONTINUE_TAG):
        return rendered[:loc]
    return rendered[:loc].rstrip()


def render_prompt(state: AppState, messages: list[Any], t: dict[str, Any],
                  default_agp: bool) -> str:
    source = t.get("chat_template")
    if source is not None:
        try:
            template = compile_template(source)
        except ValueError as e:
            raise bad(str(e), "chat_template") from None
    elif state.template is not None:
        source = state.template
        template = compile_template(source)
    else:
        raise bad("This model has no chat template; pass `chat_template` or use /v1/completions.")
    msgs = prepare_messages(messages)
    agp = t.get("add_generation_prompt", default_agp)
    cont = t.get("continue_final_message", False)
    try:
        if cont and agp:
            raise ValueError(
                "continue_final_message and add_generation_prompt are not compatible. Use "
                "continue_final_message when you want the model to continue the final message, "
                "and add_generation_prompt when you want to add a header that will prompt it to "
                "start a new assistant message instead.")
        msgs = _normalize(msgs)
        final = _tag_final(msgs, source) if cont else None
        ctx: dict[str, Any] = {
            "messages": msgs, "tools": t.get("tools"), "documents": t.get("documents"),
            "add_generation_prompt": agp, "bos_token": state.model_info.bos_token,
            "eos_token": state.model_info.eos_token, **(t.get("chat_template_kwargs") or {}),
        }
        rendered = template.render(**ctx)
        return _cut(rendered, final) if final is not None else rendered
    except Exception as e:  # noqa: BLE001 - template errors (raise_exception, ...) are 400s
        raise bad(str(e)) from None
