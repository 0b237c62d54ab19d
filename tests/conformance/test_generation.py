"""Generation through every frontend: the same JSON value (text, token counts, finish reasons,
usage, logprobs within 1e-4) and SSE events for the same greedy request."""

from __future__ import annotations

from typing import Any

import openai
import pytest

from tests.conformance.conftest import API_KEY, assert_same, parse_sse, parsed
from tests.openapi_doc import response_validator

CHAT = [{"role": "user", "content": "What is the capital of France?"}]

CASES: list[tuple[str, dict[str, Any]]] = [
    ("/v1/chat/completions", {"messages": CHAT, "max_tokens": 12, "temperature": 0}),
    ("/v1/chat/completions", {"messages": CHAT, "max_completion_tokens": 5, "temperature": 0,
                              "logprobs": True, "top_logprobs": 3}),
    ("/v1/chat/completions", {"messages": CHAT, "max_tokens": 6, "temperature": 0,
                              "logprobs": True}),
    ("/v1/chat/completions", {"messages": CHAT, "max_tokens": 16, "temperature": 0,
                              "stop": [" of", "Paris"], "n": 2}),
    ("/v1/chat/completions", {"messages": CHAT, "max_tokens": 16, "temperature": 0,
                              "stop": "Paris", "include_stop_str_in_output": True}),
    ("/v1/chat/completions", {"messages": CHAT, "max_tokens": 8, "temperature": 0.8,
                              "seed": 1234, "n": 2}),
    ("/v1/chat/completions", {"messages": CHAT, "max_tokens": 8, "temperature": 0,
                              "presence_penalty": 1.5, "frequency_penalty": 1.0,
                              "repetition_penalty": 1.3}),
    ("/v1/chat/completions", {"messages": CHAT, "max_tokens": 6, "temperature": 0,
                              "prompt_logprobs": 2}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"},
                                           {"role": "assistant", "content": "The answer is"}],
                              "continue_final_message": True, "max_tokens": 6,
                              "temperature": 0}),
    ("/v1/chat/completions", {"messages": CHAT, "max_tokens": 6, "temperature": 0,
                              "skip_special_tokens": False, "ignore_eos": True,
                              "stop_token_ids": [2]}),
    ("/v1/completions", {"prompt": "The capital of France is", "max_tokens": 8,
                         "temperature": 0}),
    ("/v1/completions", {"prompt": ["Once upon a time", "def fibonacci(n):"], "max_tokens": 6,
                         "temperature": 0, "logprobs": 2}),
    ("/v1/completions", {"prompt": [504, 3458, 282], "max_tokens": 5, "temperature": 0,
                         "echo": True}),
    ("/v1/completions", {"prompt": [[504, 3458], [1, 2, 3]], "max_tokens": 4,
                         "temperature": 0, "logprobs": 0}),
    # lm-eval's loglikelihood shape, and streamed: the echo carries the prompt's logprobs
    ("/v1/completions", {"prompt": [504, 3458, 282], "max_tokens": 1, "temperature": 0,
                         "echo": True, "logprobs": 1}),
    ("/v1/completions", {"prompt": [[504, 3458], [1, 2, 3]], "max_tokens": 3,
                         "temperature": 0, "echo": True, "logprobs": 2, "n": 2}),
    ("/v1/completions", {"prompt": "Echo a string", "max_tokens": 2, "temperature": 0,
                         "echo": True, "logprobs": 0}),
    ("/v1/completions", {"prompt": "List three colors:", "max_tokens": 16, "temperature": 0,
                         "stop": ["\n\n", "3."], "min_tokens": 2}),
    ("/v1/completions", {"prompt": "我喜欢吃", "max_tokens": 10, "temperature": 0}),
    ("/v1/completions", {"prompt": "Emoji: 🎉", "max_tokens": 10, "temperature": 0,
                         "logit_bias": {"28": -100}}),
    ("/v1/completions", {"prompt": "The quick brown fox", "max_tokens": 4, "temperature": 0,
                         "prompt_logprobs": 1}),
    ("/v1/completions", {"prompt": "The capital of France is", "max_tokens": 6,
                         "temperature": 0.9, "seed": 11, "allowed_token_ids": [7, 42, 100, 260],
                         "logprobs": 1, "return_tokens_as_token_ids": True}),
    # A prompt right at the window: 511 tokens leave room for exactly one.
    ("/v1/completions", {"prompt": [504] * 511, "temperature": 0}),
]


def _ids(case: tuple[str, dict[str, Any]]) -> str:
    return case[0].rsplit("/", 1)[-1] + ":" + ",".join(sorted(case[1]))


@pytest.mark.parametrize("stream", [False, True], ids=["full", "stream"])
@pytest.mark.parametrize("case", CASES, ids=[_ids(c) for c in CASES])
def test_same_answer(servers: dict, case: tuple[str, dict[str, Any]], stream: bool) -> None:
    path, body = case
    body = {**body, "stream": stream}
    if stream:
        body["stream_options"] = {"include_usage": True}
    results = {}
    if stream and body.get("prompt_logprobs"):
        # As vLLM: a stream has no place for the prompt's logprobs (the full form has them).
        for mode, s in servers.items():
            r = s.post(path, body)
            assert r.status_code == 400 and r.json()["error"] == {
                "message": "prompt_logprobs are not available when stream=true.",
                "type": "BadRequestError", "param": "prompt_logprobs", "code": 400}, mode
        return
    for mode, s in servers.items():
        r = s.post(path, body)
        assert r.status_code == 200, (mode, r.text)
        if stream:
            assert r.headers["content-type"] == "text/event-stream; charset=utf-8"
            results[mode] = _merge_streams(parse_sse(r.content))
        else:
            assert r.headers["content-type"] == "application/json"
            results[mode] = parsed(r)
    assert_same(results)
    if not stream:  # the body is the one the OpenAPI document describes
        check = response_validator(path, "POST", 200)
        assert check is not None and check.is_valid(results["rust"]), results["rust"]


def _merge_streams(chunks: list[Any]) -> Any:
    """Multi-prompt streams interleave in any order: compare chunks grouped by choice."""
    by_choice: dict[int, list[Any]] = {}
    tail = []
    for c in chunks:
        if not c["choices"]:
            tail.append(c)
        for ch in c["choices"]:
            by_choice.setdefault(ch["index"], []).append({**c, "choices": [ch]})
    return {"choices": [by_choice[k] for k in sorted(by_choice)], "tail": tail}


def test_openai_client(servers: dict) -> None:
    """The official client parses every frontend's answers, streamed or not."""
    texts = {}
    for mode, s in servers.items():
        client = openai.OpenAI(base_url=s.url + "/v1", api_key=API_KEY, max_retries=0)
        model = client.models.list().data[0].id
        chat = client.chat.completions.create(model=model, messages=CHAT, max_tokens=8,
                                              temperature=0)
        stream = client.chat.completions.create(model=model, messages=CHAT, max_tokens=8,
                                                temperature=0, stream=True)
        streamed = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
        comp = client.completions.create(model=model, prompt="Water boils at", max_tokens=8,
                                         temperature=0, logprobs=1)
        assert chat.choices[0].message.content == streamed
        texts[mode] = (chat.choices[0].message.content, comp.choices[0].text,
                       chat.usage.total_tokens, comp.usage.total_tokens)
    assert len(set(texts.values())) == 1, texts


def test_stop_string_never_leaks_in_stream(servers: dict) -> None:
    """A stop string split across chunks is held back, never sent then retracted."""
    body = {"prompt": "Count: one, two, three, four, five,", "max_tokens": 16,
            "temperature": 0, "stream": True}
    for s in servers.values():
        full = s.post("/v1/completions", {**body, "stream": False}).json()["choices"][0]["text"]
        stop = full[3:9] if len(full) > 9 else full[-3:]
        chunks = parse_sse(s.post("/v1/completions", {**body, "stop": [stop]}).content)
        text = "".join(c["choices"][0]["text"] for c in chunks if c["choices"])
        assert stop not in text
        assert text == full[: full.index(stop)]
        assert chunks[-1]["choices"][0]["stop_reason"] == stop



@pytest.mark.parametrize(("path", "body"), [
    ("/v1/chat/completions", {"messages": CHAT, "max_tokens": 7, "n": 2, "temperature": 0.8,
                              "seed": 7, "logprobs": True}),
    ("/v1/completions", {"prompt": ["Once upon a time", "The capital of France is"],
                         "max_tokens": 5, "temperature": 0, "logprobs": 0}),
], ids=["chat", "completions"])
def test_continuous_usage_stats(servers: dict, path: str, body: dict[str, Any]) -> None:
    """vLLM's stream_options.continuous_usage_stats: every chunk carries its choice's running
    usage (its prompt's tokens; the choice's tokens so far, one per logprob entry sent)."""
    body = {**body, "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    chat = path.endswith("chat/completions")
    for mode, s in servers.items():
        chunks = parse_sse(s.post(path, body).content)
        final = chunks[-1]
        assert final["choices"] == [] and final["usage"]["completion_tokens"] > 0, mode
        sent: dict[int, int] = {}
        last: dict[int, dict[str, int]] = {}
        for c in chunks[:-1]:
            (ch,) = c["choices"]
            lp = ch["logprobs"]
            tokens = (lp["content"] if chat else lp["tokens"]) if lp else []
            sent[ch["index"]] = done = sent.get(ch["index"], 0) + len(tokens)
            u = c["usage"]
            assert u == {"prompt_tokens": u["prompt_tokens"], "completion_tokens": done,
                         "total_tokens": u["prompt_tokens"] + done}, (mode, c)
            last[ch["index"]] = u
        assert sorted(last) == [0, 1], mode
        assert sum(u["completion_tokens"] for u in last.values()) \
            == final["usage"]["completion_tokens"], mode
        # chat: both choices share the one prompt; completions: one choice per prompt
        prompts = [u["prompt_tokens"] for u in last.values()]
        assert (prompts[0] if chat else sum(prompts)) == final["usage"]["prompt_tokens"], mode
        if chat:
            assert prompts[0] == prompts[1] and chunks[0]["usage"]["completion_tokens"] == 0
        # Without it, chunks carry a null usage, as before.
        plain = parse_sse(s.post(path, {**body, "stream_options": {"include_usage": True}})
                          .content)
        assert all(c["usage"] is None for c in plain[:-1]), mode


def test_allowed_token_ids(servers: dict) -> None:
    """Every sampled token is one of allowed_token_ids, in chat and completions."""
    allowed = {7, 42, 100, 260}
    for path, body in [("/v1/completions", {"prompt": "The capital of France is"}),
                       ("/v1/chat/completions", {"messages": CHAT, "logprobs": True})]:
        body = {**body, "max_tokens": 8, "temperature": 1.0, "seed": 5, "ignore_eos": True,
                "allowed_token_ids": sorted(allowed), "return_tokens_as_token_ids": True,
                **({"logprobs": 0} if path == "/v1/completions" else {})}
        for mode, s in servers.items():
            r = s.post(path, body)
            assert r.status_code == 200, (mode, r.text)
            lp = r.json()["choices"][0]["logprobs"]
            tokens = lp["tokens"] if "tokens" in lp else [t["token"] for t in lp["content"]]
            ids = {int(t.removeprefix("token_id:")) for t in tokens}
            assert len(tokens) == 8 and ids <= allowed, (mode, path, tokens)
