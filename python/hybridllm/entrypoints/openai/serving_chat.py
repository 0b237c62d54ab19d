"""POST /v1/chat/completions (chat.rs)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from hybridllm.entrypoints.openai.disconnect import unless_disconnected
from hybridllm.entrypoints.openai.errors import bad, json_response
from hybridllm.entrypoints.openai.generate import (
    GenRequest,
    Output,
    collect,
    generate_many,
    stream_chunks,
    tokenize,
    usage_json,
)
from hybridllm.entrypoints.openai.logprobs import chat_content, prompt_logprobs
from hybridllm.entrypoints.openai.prompt import render_prompt
from hybridllm.entrypoints.openai.protocol import ChatCompletionRequest, read_request
from hybridllm.entrypoints.openai.sse import SSEResponse
from hybridllm.entrypoints.openai.state import (
    check_model,
    check_task,
    get_state,
    new_id,
    now,
)
from hybridllm.entrypoints.openai.validation import (
    check_beam_search,
    check_max_tokens_limit,
    fit_max_tokens,
    validate,
)

router = APIRouter()


@router.post("/v1/chat/completions")
async def chat_completions(request: Request) -> Response:
    state = get_state(request)
    req = await read_request(request, ChatCompletionRequest, state.options.max_request_body_bytes)
    check_model(state, req.model)
    check_task(state, "Chat Completions", embed=False)
    if not req.logprobs and req.top_logprobs is not None and req.top_logprobs > 0:
        raise bad("top_logprobs requires logprobs to be true.", "top_logprobs")
    top = (req.top_logprobs or 0) if req.logprobs else None
    params = validate(req, top, state.vocab_size)
    params.beam = check_beam_search(req, bool(req.stream), top, state.options.max_beam_width,
                                    state.model_info.max_num_seqs)
    cap = state.options.max_tokens_limit
    check_max_tokens_limit(req, cap)
    prompt = render_prompt(state, req.messages, req, not req.continue_final_message)
    ids = await tokenize(state, prompt, bool(req.add_special_tokens))
    max_tokens = fit_max_tokens(len(ids), params.max_tokens, state.max_model_len, cap)
    rid, created, model, n = new_id("chatcmpl"), now(), state.served_names[0], params.n
    top_n, want_lp = params.logprobs or 0, params.logprobs is not None
    gens = [GenRequest(rid, ids, params, max_tokens)]
    prompts, events = await unless_disconnected(request, generate_many(state, gens))

    def logprobs(lps: list[Any]) -> Any:
        return {"content": chat_content(state.tokenizer, lps, top_n)} if want_lp else None

    if req.stream:
        usage = req.stream_options is not None and req.stream_options.include_usage
        head = {"id": rid, "object": "chat.completion.chunk", "created": created, "model": model}
        first = [{"index": i, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                  "finish_reason": None} for i in range(n)]

        def choice(i: int, ev: Output) -> Any:
            c = {"index": i, "delta": {} if not ev.text and ev.finish else {"content": ev.text},
                 "logprobs": logprobs(ev.logprobs),
                 "finish_reason": ev.finish.reason if ev.finish else None}
            if ev.finish:
                c["stop_reason"] = ev.finish.stop_reason  # on a choice's last chunk
            return c

        return SSEResponse(stream_chunks(head, usage, events, prompts, n, want_lp, first, choice))

    choices = await unless_disconnected(request, collect(events, prompts, n))
    return json_response({
        "id": rid, "object": "chat.completion", "created": created, "model": model,
        "choices": [{
            "index": i, "message": {"role": "assistant", "content": c.text, "tool_calls": []},
            "logprobs": logprobs(c.logprobs), "finish_reason": c.finish.reason,
            "stop_reason": c.finish.stop_reason,
        } for i, c in enumerate(choices)],
        "usage": usage_json(prompts, sum(c.tokens for c in choices)),
        "prompt_logprobs": prompt_logprobs(state.tokenizer, prompts[0].prompt_logprobs),
    })
