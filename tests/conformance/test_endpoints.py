"""/tokenize, /detokenize, /v1/models, /health, /version, /metrics; disconnect aborts."""

from __future__ import annotations

import re
import time
from typing import Any

import httpx

from tests.conformance.conftest import MAX_MODEL_LEN, assert_same, parse_sse, parsed

METRICS = [
    "hybridllm:num_requests_running", "hybridllm:num_requests_waiting",
    "hybridllm:kv_cache_usage_perc", "hybridllm:prompt_tokens_total",
    "hybridllm:generation_tokens_total", "hybridllm:prefix_cache_queries_total",
    "hybridllm:prefix_cache_hits_total", "hybridllm:num_preemptions_total",
    "hybridllm:frontend_requests_in_flight", "hybridllm:request_success_total",
    "hybridllm:time_to_first_token_seconds", "hybridllm:inter_token_latency_seconds",
    "hybridllm:e2e_request_latency_seconds", "hybridllm:request_queue_time_seconds",
    "hybridllm:worker_requests_total", "hybridllm:worker_outstanding_tokens",
    "hybridllm:worker_up", "hybridllm:spec_decode_num_drafts_total",
    "hybridllm:spec_decode_num_draft_tokens_total",
    "hybridllm:spec_decode_num_accepted_tokens_total",
]


def _same(servers: dict, method: str, path: str, body: object = None) -> Any:
    out = {}
    for mode, s in servers.items():
        r = s.post(path, body) if method == "POST" else s.http.get(path)
        assert r.status_code == 200, (mode, r.text)
        assert r.headers["content-type"] == "application/json", mode
        out[mode] = parsed(r)
    assert_same(out, tol=0.0)
    return out["rust"]


TOKENIZE = [{"prompt": "Hello, 世界! 🎉"},
            {"prompt": "Hello", "add_special_tokens": False},
            {"messages": [{"role": "user", "content": "hi"}]},
            {"messages": [{"role": "user", "content": "hi"}],
             "add_generation_prompt": False, "add_special_tokens": True}]
DETOKENIZE = {"tokens": [19556, 28, 30, 1, 2]}


def test_tokenize_detokenize(servers: dict) -> None:
    for body in TOKENIZE:
        _same(servers, "POST", "/tokenize", body)
    value = _same(servers, "POST", "/tokenize", {"prompt": "Hello, 世界"})
    assert value["max_model_len"] == MAX_MODEL_LEN
    assert value["count"] == len(value["tokens"]) > 0
    assert value["token_strs"] is None  # vLLM's: null unless asked for
    _same(servers, "POST", "/detokenize", DETOKENIZE)


def test_tokenize_returns_token_strs(servers: dict) -> None:
    """vLLM's `return_token_strs`: each id's vocabulary string, as transformers'
    `convert_ids_to_tokens` gives it (byte-level marks kept)."""
    from transformers import AutoTokenizer

    from tests.conformance.conftest import MODEL
    value = _same(servers, "POST", "/tokenize",
                  {"prompt": "Hello, 世界 hi", "return_token_strs": True})
    hf = AutoTokenizer.from_pretrained(MODEL)
    assert value["token_strs"] == hf.convert_ids_to_tokens(value["tokens"])
    assert value["token_strs"][:3] == ["Hello", ",", "Ġ"]


def test_models_version(servers: dict) -> None:
    value = _same(servers, "GET", "/v1/models")
    assert value["object"] == "list" and value["data"][0]["id"]
    assert _same(servers, "GET", "/version") == {"version": "0.1.0"}


def test_health(servers: dict) -> None:
    for s in servers.values():
        r = httpx.get(s.url + "/health")  # no key needed
        assert r.status_code == 200 and r.content == b""


def test_metrics_names(servers: dict) -> None:
    for mode, s in servers.items():
        s.post("/v1/completions", {"prompt": "Hi", "max_tokens": 2})  # labels need a request
        r = s.http.get("/metrics")
        assert r.status_code == 200
        assert r.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
        names = set(re.findall(r"^(hybridllm:[a-z0-9_]+?)(?:_bucket|_sum|_count)?[{ ]",
                               r.text, re.M))
        assert names == set(METRICS), (mode, names ^ set(METRICS))


def _histogram(text: str, name: str) -> tuple[float, float]:
    """(count, sum) of an unlabelled histogram in a /metrics page."""
    count = re.search(rf"^{name}_count (\S+)$", text, re.M)
    total = re.search(rf"^{name}_sum (\S+)$", text, re.M)
    assert count and total, name
    return float(count.group(1)), float(total.group(1))


def test_queue_time_once_per_request(servers: dict) -> None:
    """vLLM's request_queue_time_seconds: one observation per engine request (a prompt of a
    completions list is one), the engine's wait before its first step."""
    name = "hybridllm:request_queue_time_seconds"
    for mode, s in servers.items():
        count0, sum0 = _histogram(s.http.get("/metrics").text, name)
        r = s.post("/v1/completions", {"prompt": ["Hi", "Hello"], "max_tokens": 2, "n": 2})
        assert r.status_code == 200, (mode, r.text)
        count1, sum1 = _histogram(s.http.get("/metrics").text, name)
        assert count1 - count0 == 2, mode
        assert 0 < sum1 - sum0 < 60, mode  # carried from the engine, not a default 0


def test_disconnect_aborts(servers: dict) -> None:
    """Closing a stream mid-way frees the request in the engine."""
    body = {"prompt": "Tell me a long story.", "max_tokens": 400, "temperature": 0,
            "ignore_eos": True, "stream": True}
    for mode, s in servers.items():
        with s.http.stream("POST", "/v1/completions", json=body) as r:
            for _ in r.iter_raw(64):
                break
        deadline = time.monotonic() + 10
        while True:
            text = s.http.get("/metrics").text
            running = re.search(r"^hybridllm:num_requests_running (\S+)", text, re.M)
            if running and float(running.group(1)) == 0.0:
                break
            assert time.monotonic() < deadline, f"{mode}: request still running"
            time.sleep(0.2)


def test_invocations_route_by_body(servers: dict) -> None:
    """vLLM's /invocations (SageMaker): a body with `messages` is a chat completion, one with
    `prompt` a completion, answered as those endpoints answer; streamed too; another body is
    a 400 saying what is expected."""
    chat = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 5, "temperature": 0}
    comp = {"prompt": "The capital of France is", "max_tokens": 5, "temperature": 0}
    for mode, s in servers.items():
        for path, body in (("/v1/chat/completions", chat), ("/v1/completions", comp)):
            direct, via = parsed(s.post(path, body)), parsed(s.post("/invocations", body))
            for b in (direct, via):
                b["usage"].pop("prompt_tokens_details")  # the second one hits the cache
            assert via == direct, (mode, path)
        chunks = parse_sse(s.post("/invocations", {**chat, "stream": True}).content)
        assert chunks[0]["object"] == "chat.completion.chunk", mode
        joined = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
        assert joined == direct_text(s, chat), mode
        r = s.post("/invocations", {"input": "Hi"})
        assert r.status_code == 400 and r.json()["error"]["message"] == (
            "Cannot find suitable handler for request. Expected one of: "
            "['ChatCompletionRequest', 'CompletionRequest']"), (mode, r.text)
        assert s.post("/invocations", raw=b"[1]").status_code == 400, mode


def direct_text(s: Any, chat: dict) -> str:
    return s.post("/v1/chat/completions", chat).json()["choices"][0]["message"]["content"]
