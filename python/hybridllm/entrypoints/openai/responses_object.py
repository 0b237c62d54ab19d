"""The response object of the Responses API and its streamed events (responses/object.rs):
OpenAI's shapes for text-only responses, one assistant message with one output_text part."""

from __future__ import annotations

import uuid
from typing import Any

from hybridllm.entrypoints.openai.protocol import ResponsesRequest
from hybridllm.entrypoints.openai.responses_input import new_item_id
from hybridllm.entrypoints.openai.state import now


def status(finish_reason: str) -> str:
    """How a response ended: `length` is OpenAI's incomplete (max_output_tokens)."""
    return "incomplete" if finish_reason == "length" else "completed"


def output_text(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": []}


class ResponseHead:
    """What every form of one response repeats: ids, the model, the request's echoed fields."""

    def __init__(self, req: ResponsesRequest, model: str) -> None:
        self.id, self.item_id = f"resp_{uuid.uuid4().hex}", new_item_id()
        self.store = req.store is not False
        self.fields = {
            "id": self.id, "object": "response", "created_at": now(), "model": model,
            "instructions": req.instructions, "max_output_tokens": req.max_output_tokens,
            "previous_response_id": req.previous_response_id, "store": self.store,
            "temperature": req.temperature, "top_p": req.top_p,
            "truncation": req.truncation or "disabled", "metadata": req.metadata or {},
            "user": req.user, "background": False, "parallel_tool_calls": True,
            "tool_choice": "auto" if req.tool_choice is None else req.tool_choice, "tools": [],
            "reasoning": {"effort": None, "summary": None},
            "text": {"format": {"type": "text"}}, "error": None,
        }

    def object(self, st: str, output: list[Any], usage: Any) -> dict[str, Any]:
        """The response object; output empty and usage None while in progress."""
        incomplete = {"reason": "max_output_tokens"} if st == "incomplete" else None
        return {**self.fields, "status": st, "incomplete_details": incomplete,
                "output": output, "usage": usage}

    def item(self, st: str, text: str | None) -> dict[str, Any]:
        """The assistant message item: content empty while in progress."""
        return {"id": self.item_id, "type": "message", "status": st, "role": "assistant",
                "content": [] if text is None else [output_text(text)]}

    def finished(self, text: str, finish_reason: str, usage: Any) -> dict[str, Any]:
        st = status(finish_reason)
        return self.object(st, [self.item(st, text)], usage)


def usage_json(prompt_tokens: int, cached_tokens: int, output_tokens: int) -> dict[str, Any]:
    return {"input_tokens": prompt_tokens, "input_tokens_details": {"cached_tokens": cached_tokens},
            "output_tokens": output_tokens, "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": prompt_tokens + output_tokens}
