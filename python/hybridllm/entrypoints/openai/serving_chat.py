"""POST /v1/chat/completions (chat.rs)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from hybridllm.entrypoints.openai.errors import bad, json_response
from hybridllm.entrypoints.openai.generate import (
    Finish,
    GenRequest,
    Output,
    generate_many,
    tokenize,
)
from hybridllm.entrypoints.openai.logprobs import chat_content, prompt_logprobs
from hybridllm.entrypoints.openai.protocol import (
    ChatCompletionRequest,
    TemplateArgs,
    read_request,
)
from hybridllm.entrypoints.openai.sse import ChunkHead, SSEResponse
from hybridllm.entrypoints.openai.state import AppState, check_model, get_state, new_id, now
from hybridllm.entrypoints.openai.validation import fit_max_tokens, validate
from hybridllm.text.chat_template import (
    ChatTemplateError,
    InvalidMessagesError,
    InvalidTemplateError,
    render_chat,
)

router = APIRouter()


def usage_json(prompt: int, completion: int, cached: int) -> dict[str, Any]:
    return {"prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": prompt + completion, "prompt_tokens_details": {"cached_tokens": cached}}


def render_prompt(state: AppState, messages: list[Any], t: TemplateArgs, default_agp: bool) -> str:
    """With the request's template, the --chat-template override or the model's."""
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


@router.post("/v1/chat/completions")
async def chat_completions(request: Request) -> Response:
    state = get_state(request)
    req = await read_request(request, ChatCompletionRequest, state.options.max_request_body_bytes)
    check_model(state, req.model)
    if not req.logprobs and req.top_logprobs is not None and req.top_logprobs > 0:
        raise bad("top_logprobs requires logprobs to be true.", "top_logprobs")
    params = validate(req, (req.top_logprobs or 0) if req.logprobs else None, state.vocab_size)
    prompt = render_prompt(state, req.messages, req, not req.continue_final_message)
    ids = await tokenize(state, prompt, bool(req.add_special_tokens))
    max_tokens = fit_max_tokens(len(ids), params.max_tokens, state.max_model_len)
    rid = new_id("chatcmpl")
    created, model, n = now(), state.served_names[0], params.n
    top_n, want_lp = params.logprobs or 0, params.logprobs is not None
    prompt_len = len(ids)
    events = await generate_many(state, [GenRequest(rid, ids, params, max_tokens)])
    if req.stream:
        usage = req.stream_options is not None and req.stream_options.include_usage
        head = ChunkHead(rid, "chat.completion.chunk", created, model, usage)

        async def stream() -> AsyncIterator[Any]:
            for i in range(n):
                yield head.chunk([{"index": i, "delta": {"role": "assistant", "content": ""},
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
                        c["stop_reason"] = ev.finish.stop_reason  # on a choice's last chunk
                    yield head.chunk([c])
            finally:
                await events.aclose()  # type: ignore[attr-defined]
            if head.include_usage:
                yield head.chunk([], usage_json(prompt_tokens, completion, cached))

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
    return json_response({
        "id": rid, "object": "chat.completion", "created": created, "model": model,
        "choices": choices, "usage": usage_json(prompt_tokens, sum(tokens), cached),
        "prompt_logprobs": prompt_lps,
    })
