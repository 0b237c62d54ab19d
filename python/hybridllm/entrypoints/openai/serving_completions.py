"""POST /v1/completions (completions.rs): a string, a list of strings, a token id list or a
list of them."""

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
from hybridllm.entrypoints.openai.logprobs import completion_logprobs, prompt_logprobs
from hybridllm.entrypoints.openai.protocol import CompletionRequest, read_request
from hybridllm.entrypoints.openai.sse import SSEResponse
from hybridllm.entrypoints.openai.state import check_model, check_task, get_state, new_id, now
from hybridllm.entrypoints.openai.validation import (
    DEFAULT_COMPLETION_MAX_TOKENS,
    check_beam_search,
    check_max_tokens_limit,
    fit_max_tokens,
    unset_max_tokens,
    validate,
)

router = APIRouter()

_BAD_PROMPT = ("prompt must be a string, a list of strings, a list of token ids or a list of "
               "token id lists.")


def _ids_of(v: Any) -> list[int]:
    if not isinstance(v, list) or not all(type(x) is int and 0 <= x < 1 << 32 for x in v):
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
    check_task(state, "Completions", embed=False)
    if req.suffix is not None:
        raise bad("suffix is not supported.", "suffix")
    echo = bool(req.echo)
    params = validate(req, req.logprobs, state.vocab_size)
    max_beam = state.options.max_beam_width
    params.beam = check_beam_search(req, bool(req.stream), req.logprobs, max_beam,
                                    state.model_info.max_num_seqs)
    # As vLLM: echoed logprobs are the prompt's, so ask the engine for them.
    echo_lp = echo and params.logprobs is not None
    if echo_lp and not params.sampling.HasField("prompt_logprobs"):
        params.sampling.prompt_logprobs = params.logprobs
    check_max_tokens_limit(req, state.options.max_tokens_limit)
    unset = unset_max_tokens(DEFAULT_COMPLETION_MAX_TOKENS, state.options.max_tokens_limit)
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
        max_tokens = fit_max_tokens(len(ids), params.max_tokens, state.max_model_len, unset)
        echoes.append(text if echo else "")
        gens.append(GenRequest(f"{rid}-{i}", ids, params, max_tokens))
    created, model, n, tok = now(), state.served_names[0], params.n, state.tokenizer
    top_n, want_lp = params.logprobs or 0, params.logprobs is not None
    prompts, events = await unless_disconnected(request, generate_many(state, gens))
    if req.stream:
        usage = req.stream_options is not None and req.stream_options.include_usage
        head = {"id": rid, "object": "text_completion", "created": created, "model": model}
        offsets = [0] * (len(gens) * n)  # of each choice's next token in its text
        first = [{"index": i, "text": echoes[i // n], "logprobs": None, "finish_reason": None,
                  "stop_reason": None} for i in range(len(gens) * n) if echo and not echo_lp]

        def echo_with_logprobs(p: int, info: Any) -> list[Any]:
            """The echo waits for the engine's prompt logprobs (completions.rs)."""
            out = []
            for i in range(p * n, p * n + n):
                lps, offsets[i] = completion_logprobs(tok, info.prompt_logprobs, top_n)
                out.append({"index": i, "text": echoes[p], "logprobs": lps,
                            "finish_reason": None, "stop_reason": None})
            return out

        def choice(i: int, ev: Output) -> Any:
            lps = None
            if want_lp:
                lps, offsets[i] = completion_logprobs(tok, ev.logprobs, top_n, offsets[i])
            f = ev.finish
            return {"index": i, "text": ev.text, "logprobs": lps,
                    "finish_reason": f.reason if f else None,
                    "stop_reason": f.stop_reason if f else None}

        return SSEResponse(stream_chunks(head, usage, events, prompts, n, want_lp, first, choice,
                                         echo_with_logprobs if echo_lp else None))

    choices = await unless_disconnected(request, collect(events, prompts, n))
    return json_response({
        "id": rid, "object": "text_completion", "created": created, "model": model,
        "choices": [{
            "index": i, "text": echoes[i // n] + c.text,
            "logprobs": completion_logprobs(
                tok, [*(prompts[i // n].prompt_logprobs if echo_lp else []), *c.logprobs],
                top_n)[0] if want_lp else None,
            "finish_reason": c.finish.reason, "stop_reason": c.finish.stop_reason,
            "prompt_logprobs": prompt_logprobs(tok, prompts[i // n].prompt_logprobs),
        } for i, c in enumerate(choices)],
        "usage": usage_json(prompts, sum(c.tokens for c in choices)),
    })
