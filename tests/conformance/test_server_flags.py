"""Serve flags and server surface of vLLM that change what every request gets (#34), in both
frontends: `--enable-force-include-usage` ends every stream with its usage, asked for or not,
as vLLM's flag does (`continuous_usage_stats` then follows the request's stream_options);
`--enable-prompt-tokens-details` (usage's cached tokens), `--enable-server-load-tracking`
(GET /load), `--metrics-prefix`, ORCA `endpoint-load-metrics` headers and
`return_token_ids`, and `/inference/v1/generate` (tokens in, tokens out)."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conformance.conftest import MAX_MODEL_LEN, parse_sse
from tests.launch import Server, both_frontends

# Without --enable-prompt-tokens-details (the conformance servers have it).
FLAGS = ["--max-model-len", "512", "--max-num-seqs", "4", "--kv-cache-memory", str(64 << 20),
         "--enable-force-include-usage", "--enable-server-load-tracking",
         "--metrics-prefix", "vllm"]


@pytest.fixture(scope="module")
def forced(tmp_path_factory: pytest.TempPathFactory,
           model_path: Path) -> Iterator[dict[str, Server]]:
    yield from both_frontends(tmp_path_factory.mktemp, model_path, *FLAGS)


BODIES = {
    "/v1/chat/completions": {"messages": [{"role": "user", "content": "Hi"}]},
    "/v1/completions": {"prompt": "The capital of France is"},
}


@pytest.mark.parametrize("path", list(BODIES))
@pytest.mark.parametrize("options", [None, {"include_usage": False},
                                     {"include_usage": False, "continuous_usage_stats": True}])
def test_every_stream_ends_with_its_usage(forced: dict[str, Server], path: str,
                                          options: dict[str, Any] | None) -> None:
    body: dict[str, Any] = {**BODIES[path], "max_tokens": 5, "temperature": 0,
                            "ignore_eos": True, "stream": True}
    if options is not None:
        body["stream_options"] = options
    usages = {}
    for kind, s in forced.items():
        chunks = parse_sse(s.post(path, body).content)
        final = chunks[-1]
        assert final["choices"] == [], (kind, final)
        u = final["usage"]
        assert (u["completion_tokens"], u["total_tokens"]) == (5, u["prompt_tokens"] + 5), kind
        continuous = bool(options and options.get("continuous_usage_stats"))
        running = [c["usage"] for c in chunks[:-1]]
        if continuous:
            assert all(r is not None and r["prompt_tokens"] == u["prompt_tokens"]
                       for r in running), kind
            assert running[-1]["completion_tokens"] == 5, kind
        else:
            assert all(r is None for r in running), kind
        # Not streamed, the usage is there anyway, and the same.
        whole = s.post(path, {**BODIES[path], "max_tokens": 5, "temperature": 0,
                              "ignore_eos": True}).json()
        counts = ("prompt_tokens", "completion_tokens", "total_tokens")  # cache hits aside
        assert [whole["usage"][k] for k in counts] == [u[k] for k in counts], kind
        usages[kind] = [u[k] for k in counts]
    assert usages["rust"] == usages["python"]


def test_prompt_tokens_details_only_with_the_flag(forced: dict[str, Server],
                                                  servers: dict[str, Server]) -> None:
    """As vLLM: `prompt_tokens_details` is null unless --enable-prompt-tokens-details is on
    and the prompt had prefix-cache hits; then it counts the hit blocks' tokens."""
    prompt = "Details: " + " ".join(f"d{i}" for i in range(60))
    body = {"prompt": prompt, "max_tokens": 1, "temperature": 0}
    for kind, s in forced.items():
        usages = [s.post("/v1/completions", body).json()["usage"] for _ in range(2)]
        assert [u["prompt_tokens_details"] for u in usages] == [None, None], kind
    for mode, s in servers.items():
        first, again = (s.post("/v1/completions", body).json()["usage"] for _ in range(2))
        n = first["prompt_tokens"]
        assert first["prompt_tokens_details"] is None, mode  # nothing cached: null, not 0
        # Every full 16-token block but one holding the prompt's last token is a hit.
        assert again["prompt_tokens_details"] == {"cached_tokens": (n - 1) // 16 * 16}, mode


def _load(s: Server) -> Any:
    r = httpx.get(s.url + "/load")  # open, like /health: no key
    assert r.status_code == 200 and r.headers["content-type"] == "application/json", r.text
    return r.json()


def test_load_counts_requests_in_flight(forced: dict[str, Server],
                                        servers: dict[str, Server]) -> None:
    """vLLM's GET /load: the requests in flight under --enable-server-load-tracking, held
    until a stream ends; always 0 without the flag."""
    body = {"prompt": "Count:", "max_tokens": 40, "ignore_eos": True, "stream": True}
    for name, group in (("tracked", forced), ("untracked", servers)):
        for kind, s in group.items():
            assert _load(s) == {"server_load": 0}, (name, kind)
            with s.http.stream("POST", "/v1/completions", json=body) as r:
                assert r.status_code == 200
                lines = r.iter_lines()
                next(lines)  # the stream has started
                during = _load(s)
                list(lines)
            assert during == {"server_load": 1 if name == "tracked" else 0}, (name, kind)
            deadline = time.monotonic() + 5
            while _load(s) != {"server_load": 0} and time.monotonic() < deadline:
                time.sleep(0.05)  # the count drops as the server closes the stream
            assert _load(s) == {"server_load": 0}, (name, kind)


ORCA_TEXT = re.compile(r"TEXT named_metrics\.num_requests_waiting=(\d+\.\d+), "
                       r"named_metrics\.kv_cache_usage_perc=(\d+\.\d+(e-\d+)?)")


def test_orca_load_report_headers(servers: dict[str, Server]) -> None:
    """vLLM's ORCA reporting: `endpoint-load-metrics-format: text|json` on a chat or completion
    request not streamed gets an `endpoint-load-metrics` header (vLLM's named metrics, Python
    floats); streams, other formats and requests not asking get none."""
    chat = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}
    for mode, s in servers.items():
        for path, body in (("/v1/chat/completions", chat),
                           ("/v1/completions", {"prompt": "Hi", "max_tokens": 2})):
            text = s.http.post(path, json=body, headers={"endpoint-load-metrics-format": "TEXT"})
            m = ORCA_TEXT.fullmatch(text.headers["endpoint-load-metrics"])
            assert m is not None, (mode, text.headers["endpoint-load-metrics"])
            # Nothing else runs: none waiting, and the finished request holds no KV blocks.
            assert (m[1], float(m[2])) == ("0.0", 0.0), (mode, path)
            js = s.http.post(path, json=body, headers={"endpoint-load-metrics-format": "json"})
            value = js.headers["endpoint-load-metrics"]
            assert value.startswith("JSON {\"named_metrics\": {"), (mode, value)
            assert json.loads(value[5:]) == {"named_metrics": {
                "num_requests_waiting": 0.0, "kv_cache_usage_perc": float(m[2])}}, mode
            for headers, extra in (({"endpoint-load-metrics-format": "bin"}, {}),
                                   ({}, {}),
                                   ({"endpoint-load-metrics-format": "text"}, {"stream": True})):
                r = s.http.post(path, json={**body, **extra}, headers=headers)
                assert r.status_code == 200 and "endpoint-load-metrics" not in r.headers, mode


def test_return_token_ids(servers: dict[str, Server]) -> None:
    """vLLM's `return_token_ids`: the prompt's ids (chat: at the top; completions: in each
    choice) and each choice's generated ids, which decode to its text; streamed, the prompt's
    ids come with the first chunk and the chunks' ids join to the whole response's."""
    cases = [
        ("/v1/completions", {"prompt": "The capital of France is"},
         {"prompt": "The capital of France is"}),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}]},
         {"messages": [{"role": "user", "content": "Hi"}]}),
    ]
    answers: dict[str, Any] = {}
    for mode, s in servers.items():
        for path, body, tokenize in cases:
            body = {**body, "max_tokens": 6, "temperature": 0, "ignore_eos": True}
            prompt_ids = s.post("/tokenize", tokenize).json()["tokens"]
            plain = s.post(path, body).json()
            assert "prompt_token_ids" not in plain, mode
            assert "token_ids" not in plain["choices"][0], mode
            whole = s.post(path, {**body, "return_token_ids": True}).json()
            choice = whole["choices"][0]
            top = choice if path == "/v1/completions" else whole
            assert top["prompt_token_ids"] == prompt_ids, (mode, path)
            assert len(choice["token_ids"]) == whole["usage"]["completion_tokens"] == 6
            text = choice["text"] if path == "/v1/completions" else choice["message"]["content"]
            detok = s.post("/detokenize", {"tokens": choice["token_ids"]}).json()["prompt"]
            assert detok == text, (mode, path)
            chunks = [c for c in parse_sse(
                s.post(path, {**body, "return_token_ids": True, "stream": True}).content)
                if c["choices"]]
            first = chunks[0] if path == "/v1/chat/completions" else chunks[0]["choices"][0]
            assert first["prompt_token_ids"] == prompt_ids, (mode, path)
            assert all("prompt_token_ids" not in c and
                       "prompt_token_ids" not in c["choices"][0] for c in chunks[1:]), mode
            joined = [t for c in chunks for t in c["choices"][0]["token_ids"]]
            assert joined == choice["token_ids"], (mode, path)
            answers.setdefault(path, []).append((top["prompt_token_ids"], choice["token_ids"]))
        r = s.post("/v1/chat/completions/batch", {
            "messages": [[{"role": "user", "content": "Hi"}]], "return_token_ids": True})
        assert r.status_code == 400 and r.json()["error"]["param"] == "return_token_ids", mode
    for path, got in answers.items():
        assert all(g == got[0] for g in got), path  # every frontend alike


def test_generate_tokens_in_tokens_out(servers: dict[str, Server]) -> None:
    """POST /inference/v1/generate (vLLM's GenerateRequest/GenerateResponse): token ids in,
    token ids out, the same tokens a completion of that id prompt gives; logprobs in the chat
    shape with tokens named `token_id:<id>` (the sampled token first in `top_logprobs`);
    streamed, the chunks' ids join to the whole answer's; refusals name the field."""
    answers = []
    for mode, s in servers.items():
        ids = s.post("/tokenize", {"prompt": "The capital of France is"}).json()["tokens"]
        sp = {"max_tokens": 6, "temperature": 0, "ignore_eos": True}
        completion = s.post("/v1/completions", {"prompt": ids, **sp,
                                                "return_token_ids": True}).json()
        want = completion["choices"][0]["token_ids"]
        r = s.post("/inference/v1/generate", {"token_ids": ids, "sampling_params": sp,
                                              "request_id": "abc"})
        assert r.status_code == 200, (mode, r.text)
        body = r.json()
        assert body == {"request_id": "generate-tokens-abc", "prompt_logprobs": None,
                        "kv_transfer_params": None,
                        "choices": [{"index": 0, "logprobs": None, "finish_reason": "length",
                                     "token_ids": want}]}, mode
        lp = s.post("/inference/v1/generate", {"token_ids": ids,
                                               "sampling_params": {**sp, "logprobs": 2}}).json()
        content = lp["choices"][0]["logprobs"]["content"]
        assert [c["token"] for c in content] == [f"token_id:{t}" for t in want], mode
        for c in content:
            tops = c["top_logprobs"]
            assert len(tops) == 2 and tops[0] == {"token": c["token"], "logprob": c["logprob"],
                                                  "bytes": None}, mode
            assert c["bytes"] is None and c["logprob"] <= 0, mode
        chunks = parse_sse(s.post("/inference/v1/generate", {
            "token_ids": ids, "sampling_params": sp, "stream": True,
            "stream_options": {"include_usage": True}}).content)
        assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 6
        joined = [t for c in chunks[:-1] for t in c["choices"][0]["token_ids"]]
        assert joined == want, mode
        assert chunks[-2]["choices"][0]["finish_reason"] == "length", mode
        assert all(set(c) == {"request_id", "choices"} for c in chunks[:-1]), mode
        # Unset max_tokens: the rest of the context (vLLM's generate default), not 16.
        long = (ids * MAX_MODEL_LEN)[:MAX_MODEL_LEN - 20]
        free = s.post("/inference/v1/generate", {"token_ids": long, "sampling_params": {
            "temperature": 0, "ignore_eos": True}}).json()
        assert len(free["choices"][0]["token_ids"]) == 20, mode
        for bad, param in [({"sampling_params": sp}, "token_ids"),
                           ({"token_ids": ids}, "sampling_params"),
                           ({"token_ids": [], "sampling_params": sp}, "token_ids"),
                           ({"token_ids": ids, "sampling_params": {"top_p": 2}},
                            "sampling_params.top_p"),
                           ({"token_ids": ids, "sampling_params": {"output_kind": 2}},
                            "sampling_params.output_kind"),
                           ({"token_ids": ids, "sampling_params": sp,
                             "kv_transfer_params": {"do_remote_prefill": True}},
                            "kv_transfer_params")]:
            r = s.post("/inference/v1/generate", bad)
            assert r.status_code == 400 and r.json()["error"]["param"] == param, (mode, bad)
        answers.append(body["choices"][0]["token_ids"])
    assert all(a == answers[0] for a in answers)


def test_metrics_prefix_names_every_family(forced: dict[str, Server]) -> None:
    """--metrics-prefix vllm: the same families as ever, named vllm:… (vLLM's names)."""
    from tests.conformance.test_endpoints import METRICS

    for kind, s in forced.items():
        s.post("/v1/completions", {"prompt": "Hi", "max_tokens": 2})  # labels need a request
        text = s.http.get("/metrics").text
        names = set(re.findall(r"^([a-z_]+:[a-z0-9_]+?)(?:_bucket|_sum|_count)?[{ ]", text, re.M))
        assert names == {m.replace("hybridllm:", "vllm:") for m in METRICS}, kind
