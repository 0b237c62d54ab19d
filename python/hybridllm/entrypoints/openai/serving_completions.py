"""POST /v1/completions (completions.rs): a string, a list of strings, a token id list or a
list of them."""

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
from hybridllm.entrypoints.openai.logprobs import CompletionLogprobs, prompt_logprobs
from hybridllm.entrypoints.openai.protocol import CompletionRequest, read_request
from hybridllm.entrypoints.openai.serving_chat import usage_json
from hybridllm.entrypoints.openai.sse import ChunkHead, SSEResponse
from hybridllm.entrypoints.openai.state import check_model, get_state, new_id, now
from hybridllm.entrypoints.openai.validation import fit_max_tokens, validate

router = APIRouter()

_BAD_PROMPT = ("prompt must be a string, a list of strings, a list of token ids or a list of "
               "token id lists.")


def _is_u32(x: Any) -> bool:
    return type(x) is int and 0 <= x < 1 << 32


def _ids_of(v: Any) -> list[int]:
    if not isinstance(v, list) or not all(_is_u32(x) for x in v):
        raise bad(_BAD_PROMPT, "prompt")
    return v


def parse_prompts(v: Any) -> list[str | list[int]]:
    if isinstance(v, str):
        return [v]
    if isinstance(v, list):
        if not v:
            raise bad("prompt must not be empty.", "prompt")
        if all(isinstance(x, str) for x in v):
            return list(v)
        if all(type(x) in (int, float) for x in v):
            return [_ids_of(v)]
        return [_ids_of(x) for x in v]
    raise bad(_BAD_PROMPT, "prompt")


@router.post("/v1/completions")
async def completions(request: Request) -> Response:
    state = get_state(request)
    req = await read_request(request, CompletionRequest, state.options.max_request_body_bytes)
    check_model(state, req.model)
    if req.suffix is not None:
        raise bad("suffix is not supported.", "suffix")
    echo = bool(req.echo)
    if echo and req.logprobs is not None:
        raise bad("echo together with logprobs is not supported.", "echo")
    params = validate(req, req.logprobs, state.vocab_size)
    gens, echoes = [], []
    rid = new_id("cmpl")
    for i, p in enumerate(parse_prompts(req.prompt)):
        if isinstance(p, str):
            ids, text = await tokenize(state, p, req.add_special_tokens is not False), p
        else:
            badid = next((t for t in p if t >= state.vocab_size), None)
            if badid is not None:
                raise bad(f"Token id {badid} is out of vocabulary (size {state.vocab_size}).",
                          "prompt")
            ids, text = p, state.tokenizer.decode(p) if echo else ""
        if not ids:
            raise bad("The prompt is empty (0 tokens).", "prompt")
        max_tokens = fit_max_tokens(len(ids), params.max_tokens, state.max_model_len)
        echoes.append(text if echo else "")
        gens.append(GenRequest(f"{rid}-{i}", ids, params, max_tokens))
    n, num_prompts = params.n, len(gens)
    prompt_lens = [len(g.prompt_ids) for g in gens]
    created, model = now(), state.served_names[0]
    top_n, want_lp = params.logprobs or 0, params.logprobs is not None
    events = await generate_many(state, gens)
    if req.stream:
        usage = req.stream_options is not None and req.stream_options.include_usage
        head = ChunkHead(rid, "text_completion", created, model, usage)

        async def stream() -> AsyncIterator[Any]:
            offsets = [0] * (num_prompts * n)
            if echo:
                for p, text in enumerate(echoes):
                    for j in range(n):
                        yield head.chunk([{"index": p * n + j, "text": text, "logprobs": None,
                                           "finish_reason": None, "stop_reason": None}])
            prompt_tokens, cached, completion = list(prompt_lens), 0, 0
            try:
                async for p, ev in events:
                    if not isinstance(ev, Output):
                        prompt_tokens[p] = ev.prompt_tokens
                        cached += ev.cached_tokens
                        continue
                    completion += ev.num_tokens
                    ci = p * n + ev.index
                    if not ev.text and ev.finish is None and (not ev.logprobs or not want_lp):
                        continue
                    lpj = None
                    if want_lp:
                        delta = CompletionLogprobs(offsets[ci])
                        for x in ev.logprobs:
                            delta.push(state.tokenizer, x, top_n)
                        offsets[ci] = delta.offset
                        lpj = delta.to_json()
                    f = ev.finish
                    yield head.chunk([{"index": ci, "text": ev.text, "logprobs": lpj,
                                       "finish_reason": f.reason if f else None,
                                       "stop_reason": f.stop_reason if f else None}])
            finally:
                await events.aclose()  # type: ignore[attr-defined]
            if head.include_usage:
                yield head.chunk([], usage_json(sum(prompt_tokens), completion, cached))

        return SSEResponse(stream())

    total = num_prompts * n
    texts = [echoes[i // n] for i in range(total)]
    lps = [CompletionLogprobs() for _ in range(total)]
    tokens, finishes = [0] * total, [None] * total
    prompt_tokens, cached, prompt_lps = list(prompt_lens), 0, [None] * num_prompts
    async for p, ev in events:
        if not isinstance(ev, Output):
            prompt_tokens[p] = ev.prompt_tokens
            cached += ev.cached_tokens
            if len(ev.prompt_logprobs):
                prompt_lps[p] = prompt_logprobs(state.tokenizer, list(ev.prompt_logprobs))
            continue
        ci = p * n + ev.index
        texts[ci] += ev.text
        tokens[ci] += ev.num_tokens
        for x in ev.logprobs:
            lps[ci].push(state.tokenizer, x, top_n)
        if ev.finish is not None:
            finishes[ci] = ev.finish  # type: ignore[call-overload]
    choices = []
    for i in range(total):
        f: Finish = finishes[i] or Finish("abort")
        choices.append({"index": i, "text": texts[i],
                        "logprobs": lps[i].to_json() if want_lp else None,
                        "finish_reason": f.reason, "stop_reason": f.stop_reason,
                        "prompt_logprobs": prompt_lps[i // n]})
    return json_response({
        "id": rid, "object": "text_completion", "created": created, "model": model,
        "choices": choices, "usage": usage_json(sum(prompt_tokens), sum(tokens), cached),
    })
