"""POST /v1/chat/completions (chat.rs)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from hybridllm.entrypoints.openai.errors import bad
from hybridllm.entrypoints.openai.generate import (
    Finish,
    GenRequest,
    Output,
    generate_many,
    tokenize,
)
from hybridllm.entrypoints.openai.http_utils import SSEResponse, get_state, read_json
from hybridllm.entrypoints.openai.jsonfmt import RustJSONResponse
from hybridllm.entrypoints.openai.logprobs import chat_content, prompt_logprobs
from hybridllm.entrypoints.openai.state import AppState, check_model, new_id, now
from hybridllm.entrypoints.openai.validation import SAMPLING_SCHEMA, fit_max_tokens, validate
from hybridllm.text.chat_template import (
    ChatTemplateError,
    InvalidMessagesError,
    InvalidTemplateError,
    render_chat,
)

router = APIRouter()

TEMPLATE_SCHEMA: list[tuple[str, Any, bool]] = [
    ("tools", "any", False), ("documents", "any", False), ("add_generation_prompt", "bool", False),
    ("continue_final_message", "bool", False), ("chat_template", "str", False),
    ("chat_template_kwargs", ("map", "any"), False),
]

CHAT_SCHEMA: list[tuple[str, Any, bool]] = [
    ("model", "str", False), ("messages", ("seq", "any"), True),
    ("*flatten", SAMPLING_SCHEMA, False), ("logprobs", "bool", False),
    ("top_logprobs", "i64", False), ("stream", "bool", False),
    ("stream_options", "struct:StreamOptions", False), ("*flatten", TEMPLATE_SCHEMA, False),
    ("add_special_tokens", "bool", False),
]


def usage_json(prompt: int, completion: int, cached: int) -> dict[str, Any]:
    return {"prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": prompt + completion, "prompt_tokens_details": {"cached_tokens": cached}}


def render_prompt(state: AppState, messages: list[Any], t: dict[str, Any],
                  default_agp: bool) -> str:
    """With the request's template, the --chat-template override or the model's."""
    source = t.get("chat_template", state.template)
    if source is None:
        raise bad("This model has no chat template; pass `chat_template` or use /v1/completions.")
    info = state.model_info
    try:
        return render_chat(source, messages,
                           add_generation_prompt=t.get("add_generation_prompt", default_agp),
                           continue_final_message=t.get("continue_final_message", False),
                           tools=t.get("tools"), documents=t.get("documents"),
                           bos_token=info.bos_token, eos_token=info.eos_token,
                           extra=t.get("chat_template_kwargs"))
    except InvalidTemplateError as e:  # only a request's own: the others compiled at start-up
        raise bad(str(e), "chat_template") from None
    except InvalidMessagesError as e:
        raise bad(str(e), "messages") from None
    except ChatTemplateError as e:
        raise bad(str(e)) from None


@router.post("/v1/chat/completions")
async def chat_completions(request: Request) -> Response:
    state = get_state(request)
    req = await read_json(request, CHAT_SCHEMA, "ChatRequest")
    check_model(state, req.get("model"))
    want, top = req.get("logprobs", False), req.get("top_logprobs")
    if not want and top is not None and top > 0:
        raise bad("top_logprobs requires logprobs to be true.", "top_logprobs")
    lp = (top or 0) if want else None
    params = validate(req, lp, state.vocab_size)
    agp = not req.get("continue_final_message", False)
    prompt = render_prompt(state, req["messages"], req, agp)
    ids = await tokenize(state, prompt, req.get("add_special_tokens", False))
    max_tokens = fit_max_tokens(len(ids), params.max_tokens, state.max_model_len)
    rid = new_id("chatcmpl")
    created, model, n = now(), state.served_names[0], params.n
    top_n, want_lp = params.logprobs or 0, params.logprobs is not None
    prompt_len = len(ids)
    events = await generate_many(state, [GenRequest(rid, ids, params, max_tokens)])
    if req.get("stream", False):
        include_usage = bool(req.get("stream_options", {}).get("include_usage"))

        def chunk(choices: list[Any], usage: Any = None) -> dict[str, Any]:
            c = {"id": rid, "object": "chat.completion.chunk", "created": created,
                 "model": model, "choices": choices}
            if include_usage:
                c["usage"] = usage
            return c

        async def stream() -> AsyncIterator[Any]:
            for i in range(n):
                yield chunk([{"index": i, "delta": {"role": "assistant", "content": ""},
                              "logprobs": None, "finish_reason": None}])
            prompt_tokens, cached, completion = prompt_len, 0, 0
            try:
                async for _, ev in events:
                    if not isinstance(ev, Output):
                        prompt_tokens, cached = ev.prompt_tokens, ev.cached_tokens
                        continue
                    completion += ev.num_tokens
                    if not ev.text and ev.finish is None and (not ev.logprobs or not want_lp):
                        continue
                    lpj = ({"content": chat_content(state.tokenizer, ev.logprobs, top_n)}
                           if want_lp else None)
                    delta = {} if not ev.text and ev.finish else {"content": ev.text}
                    c: dict[str, Any] = {"index": ev.index, "delta": delta, "logprobs": lpj,
                                         "finish_reason": ev.finish.reason if ev.finish else None}
                    if ev.finish:
                        c["stop_reason"] = ev.finish.stop_reason
                    yield chunk([c])
            finally:
                await events.aclose()  # type: ignore[attr-defined]
            if include_usage:
                yield chunk([], usage_json(prompt_tokens, completion, cached))

        return SSEResponse(stream())

    texts, lps, tokens = [""] * n, [[] for _ in range(n)], [0] * n
    finishes: list[Finish | None] = [None] * n
    prompt_tokens, cached, prompt_lps = prompt_len, 0, None
    async for _, ev in events:
        if not isinstance(ev, Output):
            prompt_tokens, cached = ev.prompt_tokens, ev.cached_tokens
            if len(ev.prompt_logprobs):
                prompt_lps = prompt_logprobs(state.tokenizer, list(ev.prompt_logprobs))
            continue
        texts[ev.index] += ev.text
        tokens[ev.index] += ev.num_tokens
        if want_lp:
            lps[ev.index].extend(chat_content(state.tokenizer, ev.logprobs, top_n))
        if ev.finish is not None:
            finishes[ev.index] = ev.finish
    choices = []
    for i in range(n):
        f = finishes[i] or Finish("abort")
        choices.append({
            "index": i,
            "message": {"role": "assistant", "content": texts[i], "tool_calls": []},
            "logprobs": {"content": lps[i]} if want_lp else None,
            "finish_reason": f.reason, "stop_reason": f.stop_reason,
        })
    return RustJSONResponse({
        "id": rid, "object": "chat.completion", "created": created, "model": model,
        "choices": choices, "usage": usage_json(prompt_tokens, sum(tokens), cached),
        "prompt_logprobs": prompt_lps,
    })
