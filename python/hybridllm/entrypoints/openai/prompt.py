"""From chat messages to a prompt (prompt.rs): the API core renders with the request's
template, the --chat-template override or the model's, and refuses as the Rust frontend does
(a core ApiError). Shared by chat, responses and /tokenize."""

from __future__ import annotations

import json
from typing import Any

from hybridllm import _api
from hybridllm.entrypoints.openai.protocol import TemplateArgs
from hybridllm.entrypoints.openai.state import AppState


def render_prompt(state: AppState, messages: list[Any], t: TemplateArgs, default_agp: bool) -> str:
    args = {"tools": t.tools, "documents": t.documents,
            "add_generation_prompt": t.add_generation_prompt,
            "continue_final_message": t.continue_final_message,
            "chat_template": t.chat_template, "chat_template_kwargs": t.chat_template_kwargs}
    info = state.model_info
    return _api.render_chat(state.template, json.dumps(messages), json.dumps(args), default_agp,
                            info.bos_token, info.eos_token)
