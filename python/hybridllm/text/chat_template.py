"""Chat prompts through the API core (`hybridllm._api`: minijinja set up as transformers sets
up Jinja2, OpenAI messages prepared as vLLM prepares them), the project's one renderer: the
offline `LLM.chat` and the Python fallback frontend both render here, the Rust frontend with the
same Rust code."""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

from hybridllm import _api


class ChatTemplateError(ValueError):
    """The core refused the conversation or the template; `param` names the request field at
    fault (None where the template itself refused)."""

    def __init__(self, message: str, param: str | None) -> None:
        super().__init__(message)
        self.param = param


@lru_cache(maxsize=16)
def compile_template(source: str) -> _api.ChatTemplate:
    try:
        return _api.ChatTemplate(source)
    except ValueError as e:
        raise ChatTemplateError(str(e), "chat_template") from None


def render_chat(
    source: str | None,
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
    """The prompt text of `messages` under the template `source`; a refusal is a
    ChatTemplateError with the core's message."""
    template = compile_template(source) if source is not None else None
    args = {"tools": tools, "documents": documents,
            "add_generation_prompt": add_generation_prompt,
            "continue_final_message": continue_final_message,
            "chat_template_kwargs": extra}
    try:
        return _api.render_chat(template, json.dumps(messages), json.dumps(args),
                                add_generation_prompt, bos_token or "", eos_token or "")
    except _api.ApiError as e:
        error = json.loads(e.args[1])["error"]
        raise ChatTemplateError(error["message"], error["param"]) from None
