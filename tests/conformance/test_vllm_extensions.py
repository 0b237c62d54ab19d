"""vLLM's request extensions honoured (#33), in every frontend through the core:
`return_tokens_as_token_ids`, `truncate_prompt_tokens`, chat `echo`, `cache_salt` (chat,
completions, Responses) and `priority`'s refusal without --scheduling-policy priority
(its ordering: tests/reliability/test_priority.py)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conformance.conftest import (
    MAX_MODEL_LEN,
    assert_equal,
    assert_same,
    parse_sse,
    parsed,
)

LONG = "one two three four five six seven eight nine ten eleven twelve"


def _all(servers: dict, path: str, body: dict[str, Any]) -> dict[str, Any]:
    answers = {m: parsed(s.http.post(path, json=body)) for m, s in servers.items()}
    assert_same(answers)
    return answers["rust"]


def test_return_tokens_as_token_ids(servers: dict, tokenizer) -> None:
    base = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 6,
            "temperature": 0, "logprobs": True, "top_logprobs": 2}
    plain = _all(servers, "/v1/chat/completions", base)["choices"][0]["logprobs"]["content"]
    ids = _all(servers, "/v1/chat/completions", {**base, "return_tokens_as_token_ids": True})
    as_ids = ids["choices"][0]["logprobs"]["content"]
    assert len(as_ids) == len(plain) == 6
    for a, p in zip(as_ids, plain):
        assert a["token"].startswith("token_id:") and a["logprob"] == p["logprob"]
        token_id = int(a["token"].removeprefix("token_id:"))
        assert tokenizer.decode([token_id]) == p["token"]
        assert a["bytes"] == list(a["token"].encode())
        assert [t["token"] for t in a["top_logprobs"]][0].startswith("token_id:")
    body = {"prompt": "Hello", "max_tokens": 4, "temperature": 0, "logprobs": 1}
    plain_c = _all(servers, "/v1/completions", body)["choices"][0]["logprobs"]
    ids_c = _all(servers, "/v1/completions", {**body, "return_tokens_as_token_ids": True})
    lp = ids_c["choices"][0]["logprobs"]
    assert [tokenizer.decode([int(t.removeprefix("token_id:"))]) for t in lp["tokens"]] == \
        plain_c["tokens"]
    assert lp["token_logprobs"] == plain_c["token_logprobs"]
    # vLLM's offsets count the names as written.
    assert lp["text_offset"][1] - lp["text_offset"][0] == len(lp["tokens"][0])


def test_truncate_prompt_tokens_keeps_the_last_tokens(servers: dict) -> None:
    body = {"prompt": LONG, "max_tokens": 2, "temperature": 0}
    full = _all(servers, "/v1/completions", body)
    cut = _all(servers, "/v1/completions", {**body, "truncate_prompt_tokens": 5})
    assert full["usage"]["prompt_tokens"] > 5 and cut["usage"]["prompt_tokens"] == 5
    tail = _all(servers, "/v1/completions",
                {**body, "prompt": " eight nine ten eleven twelve"})
    assert tail["usage"]["prompt_tokens"] == 5
    assert cut["choices"][0]["text"] == tail["choices"][0]["text"]
    whole = _all(servers, "/v1/completions", {**body, "truncate_prompt_tokens": -1})
    assert whole["choices"] == full["choices"]
    chat = _all(servers, "/v1/chat/completions", {
        "messages": [{"role": "user", "content": LONG}], "max_tokens": 2,
        "truncate_prompt_tokens": 7})
    assert chat["usage"]["prompt_tokens"] == 7


@pytest.mark.parametrize("value,message", [
    (0, "truncate_prompt_tokens must be -1 (the model's limit) or at least 1, got 0."),
    (MAX_MODEL_LEN + 1, f"truncate_prompt_tokens ({MAX_MODEL_LEN + 1}) is larger than the "
                        f"model's maximum input length of {MAX_MODEL_LEN} tokens."),
])
def test_truncate_prompt_tokens_out_of_range(servers: dict, value: int, message: str) -> None:
    for mode, s in servers.items():
        r = s.http.post("/v1/completions", json={"prompt": "a", "truncate_prompt_tokens": value})
        assert r.status_code == 400, mode
        assert r.json()["error"]["message"] == message, mode
        assert r.json()["error"]["param"] == "truncate_prompt_tokens", mode


def test_chat_echo_starts_with_the_final_message(servers: dict) -> None:
    start = "The capital of France is"
    base = {"messages": [{"role": "user", "content": "Tell me a fact."},
                         {"role": "assistant", "content": start}],
            "continue_final_message": True, "add_generation_prompt": False,
            "max_tokens": 6, "temperature": 0}
    plain = _all(servers, "/v1/chat/completions", base)["choices"][0]["message"]["content"]
    echoed = _all(servers, "/v1/chat/completions", {**base, "echo": True})
    assert echoed["choices"][0]["message"]["content"] == start + plain
    for mode, s in servers.items():
        r = s.http.post("/v1/chat/completions", json={**base, "echo": True, "stream": True})
        chunks = [c for c in parse_sse(r.content) if c != "[DONE]"]
        text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
        assert text == start + plain, mode
        assert chunks[1]["choices"][0]["delta"] == {"content": start}, mode
    # With a generation prompt the reply is the assistant's: a user message is not echoed.
    user_last = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3,
                 "temperature": 0}
    a = _all(servers, "/v1/chat/completions", user_last)
    b = _all(servers, "/v1/chat/completions", {**user_last, "echo": True})
    assert a["choices"] == b["choices"]


def test_cache_salt_isolates_prefix_cache_hits(servers: dict) -> None:
    """Same prompt: a hit only from a request with the same salt (none counts as its own)."""
    prompt = "Salted prefix: " + " ".join(f"w{i}" for i in range(80))

    def cached(**salt: str) -> int:
        body = {"prompt": prompt, "max_tokens": 1, "temperature": 0, **salt}
        usage = _all(servers, "/v1/completions", body)["usage"]
        return (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)

    assert cached(cache_salt="tenant-a") == 0
    hit = cached(cache_salt="tenant-a")
    assert hit > 0
    assert cached(cache_salt="tenant-b") == 0
    assert cached() == 0  # unsalted requests do not see salted blocks
    assert cached() == hit
    assert cached(cache_salt="tenant-b") == hit
    for mode, s in servers.items():
        r = s.http.post("/v1/completions", json={"prompt": "a", "cache_salt": ""})
        assert r.status_code == 400 and r.json()["error"] == {
            "message": "cache_salt must be a non-empty string.", "type": "BadRequestError",
            "param": "cache_salt", "code": 400}, mode


def test_responses_honour_cache_salt_and_refuse_an_unscheduled_priority(servers: dict) -> None:
    prompt = "Responses salt: " + " ".join(f"v{i}" for i in range(80))

    def cached(s: Any, salt: str) -> int:
        r = s.http.post("/v1/responses", json={
            "input": prompt, "max_output_tokens": 1, "temperature": 0, "store": False,
            "cache_salt": salt})
        assert r.status_code == 200, r.text
        return r.json()["usage"]["input_tokens_details"]["cached_tokens"]

    for mode, s in servers.items():
        assert cached(s, f"{mode}-a") == 0
        assert cached(s, f"{mode}-a") > 0, mode
        assert cached(s, f"{mode}-b") == 0, mode
        r = s.http.post("/v1/responses", json={"input": "hi", "priority": 2})
        assert r.status_code == 400 and r.json()["error"] == {
            "message": "Got priority 2 but Priority scheduling is not enabled (start the "
                       "server with --scheduling-policy priority).",
            "type": "BadRequestError", "param": "priority", "code": 400}, mode


def test_bad_words_match_a_ban_on_their_tokens(servers: dict, tokenizer) -> None:
    """Greedy with bad_words ["Paris"] is greedy with both of its spellings (bare, after a
    space) biased to -100, in every frontend, chat and completions."""
    ids = [tokenizer.encode(w, add_special_tokens=False).ids for w in ("Paris", " Paris")]
    assert all(len(i) == 1 for i in ids)
    for path, body in [("/v1/chat/completions", {"messages": [
            {"role": "user", "content": "What is the capital of France?"}]}),
            ("/v1/completions", {"prompt": "The capital of France is"})]:
        body = {**body, "max_tokens": 12, "temperature": 0}
        free = _all(servers, path, body)["choices"][0]
        banned = _all(servers, path, {**body, "bad_words": ["Paris"]})["choices"][0]
        biased = _all(servers, path, {**body, "logit_bias": {str(i[0]): -100 for i in ids}})
        assert "Paris" in _text(free) and "Paris" not in _text(banned), (path, banned)
        assert _text(banned) == _text(biased["choices"][0])


def _text(choice: dict[str, Any]) -> str:
    return choice["message"]["content"] if "message" in choice else choice["text"]


BATCH = "/v1/chat/completions/batch"
CONVERSATIONS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"},
     {"role": "user", "content": "Name a colour."}],
    [{"role": "user", "content": "Count to three."}],
]


def test_batch_chat_answers_each_conversation_as_the_chat_endpoint(servers: dict) -> None:
    """Choice i is conversation i's answer from /v1/chat/completions (greedy), the usage their
    sum; every frontend alike, the X-Request-Id naming the one response."""
    shared = {"max_tokens": 10, "temperature": 0, "logprobs": True, "top_logprobs": 1}
    # The conversations run at once: which one's shared prefix reaches the cache first (the
    # cached-token count) depends on timing, so it is left out of the comparison.
    answers = {m: parsed(s.http.post(BATCH, json={"messages": CONVERSATIONS, **shared}))
               for m, s in servers.items()}
    for a in answers.values():
        a["usage"].pop("prompt_tokens_details", None)
    assert_same(answers)
    batch = answers["rust"]
    singles = [_all(servers, "/v1/chat/completions", {"messages": c, **shared})
               for c in CONVERSATIONS]
    assert batch["object"] == "chat.completion" and len(batch["choices"]) == 3
    for i, (choice, single) in enumerate(zip(batch["choices"], singles)):
        # Batched with other rows, the logprobs move in the float noise (as across frontends).
        assert_equal(choice, {**single["choices"][0], "index": i}, 1e-4, f"choice {i}")
    for k in ("prompt_tokens", "completion_tokens", "total_tokens"):
        assert batch["usage"][k] == sum(s["usage"][k] for s in singles)
    assert batch["prompt_logprobs"] is None
    for mode, s in servers.items():
        r = s.http.post(BATCH, json={"messages": CONVERSATIONS[:2], "max_tokens": 2},
                        headers={"X-Request-Id": f"batch-{mode}"})
        assert r.status_code == 200 and r.json()["id"] == f"chatcmpl-batch-{mode}", r.text


@pytest.mark.parametrize("extra,param,message", [
    ({"stream": True}, "stream",
     "Batch chat completions do not support streaming: set stream to false."),
    ({"n": 2}, "n", "Batch chat completions do not support n > 1: set n to 1."),
    ({"use_beam_search": True}, "use_beam_search",
     "Batch chat completions do not support beam search: set use_beam_search to false."),
    ({"tools": [{"type": "function", "function": {"name": "f"}}]}, "tools",
     "Batch chat completions do not support tools."),
    ({"prompt_logprobs": 1}, "prompt_logprobs",
     "Batch chat completions do not return prompt_logprobs."),
    ({"messages": []}, "messages", "messages must be a non-empty list of conversations."),
    ({"messages": [CONVERSATIONS[0], []]}, "messages",
     "each conversation must be a non-empty list of messages (messages[1])."),
    ({"temperature": 3}, "temperature", None),  # a chat rule, the chat endpoint's message
])
def test_batch_chat_refusals_name_the_field(servers: dict, extra: dict, param: str,
                                            message: str | None) -> None:
    body = {"messages": CONVERSATIONS, "max_tokens": 2, **extra}
    errors = {}
    for mode, s in servers.items():
        r = s.http.post(BATCH, json=body)
        assert r.status_code == 400, (mode, r.text)
        errors[mode] = r.json()["error"]
        assert errors[mode]["param"] == param, (mode, errors[mode])
        if message is not None:
            assert errors[mode]["message"] == message, (mode, errors[mode])
    assert_same(errors)


def test_documents_reach_the_chat_template(servers: dict, tokenizer) -> None:
    """vLLM's `documents` (RAG) are the template's `documents`: with a template that renders
    them, the prompt is exactly the documents then the message."""
    template = ("{% for d in documents %}[{{ d.title }}: {{ d.text }}]{% endfor %}"
                "{% for m in messages %}{{ m.content }}{% endfor %}")
    docs = [{"title": "Atlas", "text": "Paris is in France."}]
    body = {"messages": [{"role": "user", "content": "Where?"}], "chat_template": template,
            "documents": docs}
    want = tokenizer.encode("[Atlas: Paris is in France.]Where?", add_special_tokens=False).ids
    assert _all(servers, "/tokenize", body)["tokens"] == want
    usage = _all(servers, "/v1/chat/completions", {**body, "max_tokens": 1})["usage"]
    assert usage["prompt_tokens"] == len(want)


def test_responses_honour_the_decoding_fields_of_chat(servers: dict) -> None:
    """logit_bias, include_stop_str_in_output and skip_special_tokens on /v1/responses, as on
    chat: a +100 bias forces its token, the stop string is kept, a special token shown."""
    base = {"input": "What is the capital of France?", "temperature": 0, "store": False}

    def text(s: Any, **extra: Any) -> str:
        r = s.http.post("/v1/responses", json={**base, **extra})
        assert r.status_code == 200, r.text
        return r.json()["output"][0]["content"][0]["text"]

    for mode, s in servers.items():
        assert text(s, max_output_tokens=3, logit_bias={"42": 100}) == ":::", mode
        assert text(s, max_output_tokens=12, stop=["Paris"]) == "The capital of France is ", mode
        assert text(s, max_output_tokens=12, stop=["Paris"], include_stop_str_in_output=True) \
            == "The capital of France is Paris", mode
        # Token 1 is <|im_start|>, a special token (not an EOS): dropped unless asked for.
        assert text(s, max_output_tokens=2, logit_bias={"1": 100}) == "", mode
        assert text(s, max_output_tokens=2, logit_bias={"1": 100}, skip_special_tokens=False) \
            == "<|im_start|><|im_start|>", mode  # no spaces added: vLLM's fast detokenizer
