"""From chat messages to a prompt through the chat template (prompt.rs): the request's
template, the --chat-template override or the model's. Shared by chat, responses and /tokenize."""

from __future__ import annotations

from typing import Any

from hybridllm.entrypoints.openai.errors import bad
from hybridllm.entrypoints.openai.protocol import TemplateArgs
from hybridllm.entrypoints.openai.state import AppState
from hybridllm.text.chat_template import (
    ChatTemplateError,
    InvalidMessagesError,
    InvalidTemplateError,
    render_chat,
)


def render_prompt(state: AppState, messages: list[Any], t: TemplateArgs, default_agp: bool) -> str:
    source = t.chat_template if t.chat_template is not None else state.template
    if source is None:
        raise bad("This model has no chat template; pass `chat_template` or use /v1/completions.")
    agp = default_agp if t.add_generation_prompt is None else t.add_generation_prompt
    info = state.model_info
    try:
        return render_chat(source, messages, add_generation_prompt=agp,
                           continue_final_message=bool(t.continue_final_message), tools=t.tools,
                           documents=t.documents, bos_token=info.bos_token,
                           eos_token=info.eos_token, extra=t.chat_template_kwargs)
    except InvalidTemplateError as e:  # only a request's own: the others compiled at start-up
        raise bad(str(e), "chat_template") from None
    except InvalidMessagesError as e:
        raise bad(str(e), "messages") from None
    except ChatTemplateError as e:
        raise bad(str(e)) from None
