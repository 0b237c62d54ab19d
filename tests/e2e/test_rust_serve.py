"""End to end with the official openai client against `hybridllm serve --rust-frontend`."""

from __future__ import annotations

import json
import os
import signal
import threading
import time

import httpx
import openai
import pytest

from tests.e2e.conftest import API_KEY
from tests.launch import (
    Server,
    alive,
    child_pids,
    free_port,
    metric,
    running,
    spawn,
    start,
    start_worker,
    stop,
)

CHAT = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture(scope="module")
def client(server: Server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key=API_KEY, max_retries=0)


def test_chat_answers_paris(client: openai.OpenAI) -> None:
    resp = client.chat.completions.create(model="SmolLM2-135M-Instruct", messages=CHAT,
                                          temperature=0)
    assert resp.choices[0].message.content == "The capital of France is Paris."
    assert resp.choices[0].finish_reason == "stop"
    assert resp.usage.prompt_tokens == 37 and resp.usage.completion_tokens == 8
    assert resp.usage.total_tokens == 45


@pytest.mark.parametrize("endpoint", ["chat", "completions"])
def test_stream_joins_to_non_streamed(client: openai.OpenAI, endpoint: str) -> None:
    kw = dict(model="SmolLM2-135M-Instruct", temperature=0, max_tokens=24)
    # The same request twice first: the second (compared below) and the streamed one both
    # find the prompt's full blocks in the prefix cache, so their usage (cached_tokens
    # included) is comparable whichever test ran before.
    if endpoint == "chat":
        client.chat.completions.create(messages=CHAT, **kw)
        full = client.chat.completions.create(messages=CHAT, **kw)
        chunks = list(client.chat.completions.create(
            messages=CHAT, stream=True, stream_options={"include_usage": True}, **kw))
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        expected = full.choices[0].message.content
        assert chunks[0].choices[0].delta.role == "assistant"
    else:
        prompt = "The three primary colors are"
        client.completions.create(prompt=prompt, **kw)
        full = client.completions.create(prompt=prompt, **kw)
        chunks = list(client.completions.create(
            prompt=prompt, stream=True, stream_options={"include_usage": True}, **kw))
        text = "".join(c.choices[0].text for c in chunks if c.choices)
        expected = full.choices[0].text
    assert text == expected
    assert len({c.id for c in chunks}) == 1 and len({c.created for c in chunks}) == 1
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert [f for f in finishes if f] == [full.choices[0].finish_reason]
    assert chunks[-1].choices == [] and chunks[-1].usage == full.usage


def test_stop_string_and_n2(client: openai.OpenAI) -> None:
    resp = client.chat.completions.create(
        model="SmolLM2-135M-Instruct", messages=CHAT, temperature=0, stop=["Paris"])
    assert resp.choices[0].message.content == "The capital of France is "
    assert resp.choices[0].finish_reason == "stop"
    two = client.completions.create(model="SmolLM2-135M-Instruct", prompt="Hello, my name is",
                                    n=2, max_tokens=8, temperature=1.0, seed=3)
    assert [c.index for c in two.choices] == [0, 1]
    assert two.usage.completion_tokens == 16


def test_logprobs_shapes(client: openai.OpenAI) -> None:
    chat = client.chat.completions.create(
        model="SmolLM2-135M-Instruct", messages=CHAT, temperature=0, max_tokens=5,
        logprobs=True, top_logprobs=3)
    content = chat.choices[0].logprobs.content
    assert len(content) == chat.usage.completion_tokens == 5
    assert all(len(t.top_logprobs) == 3 and t.logprob <= 0 for t in content)
    assert "".join(t.token for t in content) == chat.choices[0].message.content
    comp = client.completions.create(model="SmolLM2-135M-Instruct", prompt="Paris is",
                                     max_tokens=4, temperature=0, logprobs=2)
    lp = comp.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == 4
    assert all(2 <= len(t) <= 3 for t in lp.top_logprobs)


def test_error_statuses(server: Server, client: openai.OpenAI) -> None:
    auth = {"Authorization": f"Bearer {API_KEY}"}
    url = server.url
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="SmolLM2-135M-Instruct", messages=CHAT,
                                       temperature=5)
    assert "temperature" in e.value.message
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model="SmolLM2-135M-Instruct", prompt="hi " * 300,
                                  max_tokens=400)
    assert "maximum context length is 512 tokens" in e.value.message
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="no-such-model", messages=CHAT)
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=url + "/v1", api_key="wrong", max_retries=0).models.list()
    bad_json = httpx.post(url + "/v1/chat/completions", content=b"{not json", headers=auth)
    assert bad_json.status_code == 400 and bad_json.json()["error"]["type"] == "BadRequestError"
    big = httpx.post(url + "/v1/completions", headers=auth,
                     content=json.dumps({"prompt": "x" * (33 << 20)}).encode())
    assert big.status_code == 413 and "error" in big.json()
    route = httpx.get(url + "/v1/nothing-here", headers=auth)
    assert route.status_code == 404 and route.json()["error"]["code"] == 404
    assert httpx.get(url + "/health").status_code == 200  # still serving after all that


def test_disconnect_mid_stream_frees_request(server: Server) -> None:
    headers = {"Authorization": f"Bearer {API_KEY}"}
    body = {"model": "SmolLM2-135M-Instruct", "prompt": "Count forever:", "max_tokens": 400,
            "ignore_eos": True, "stream": True}
    with httpx.stream("POST", server.url + "/v1/completions", json=body, headers=headers) as r:
        for n, _ in enumerate(r.iter_lines()):
            if n >= 6:
                break  # hang up with most of the 400 tokens still to come
    assert metric(server, "hybridllm:num_requests_running") >= 0
    deadline = time.monotonic() + 10
    while metric(server, "hybridllm:num_requests_running") != 0:
        assert time.monotonic() < deadline, "aborted request still running"
        time.sleep(0.1)
    assert metric(server, "hybridllm:generation_tokens_total") < 400 * 2


def test_worker_death_stops_serve_nonzero(model_path, tmp_path) -> None:
    # serve's own readiness check done: its supervision loop watches the worker
    srv = start("rust", tmp_path, "--max-model-len", "512", wait="log")
    children = child_pids(srv.proc.pid)
    assert len(children) == 2  # worker and Rust frontend
    worker = next(p for p in children if "worker" in open(f"/proc/{p}/cmdline").read())
    os.kill(worker, signal.SIGKILL)
    assert srv.proc.wait(timeout=60) == 1
    assert "engine worker exited" in srv.output()
    assert not any(alive(p) for p in children)  # the frontend was stopped too


def test_sigterm_stops_everything(model_path, tmp_path) -> None:
    srv = start("rust", tmp_path, "--max-model-len", "512", wait="log")
    children = child_pids(srv.proc.pid)
    assert "Rust frontend" in srv.output()
    assert stop(srv) == 0
    assert not any(alive(p) for p in children)


def test_health_503_when_worker_unavailable(model_path, tmp_path) -> None:
    """The frontend alone, its worker gone: /health and requests answer 503."""
    from hybridllm.entrypoints.rust_frontend import find_frontend_binary

    worker = start_worker(model_path, "--max-model-len", "2048")
    port = free_port()
    frontend = spawn(
        [str(find_frontend_binary()), "--host", "127.0.0.1", "--port", str(port),
         "--engine-address", worker.url, "--args-json", "{}"], tmp_path / "frontend.log")
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(100):
            try:
                if httpx.get(url + "/health").status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        stop(worker)
        assert httpx.get(url + "/health").status_code == 503
        r = httpx.post(url + "/v1/completions", json={"prompt": "hi", "max_tokens": 2})
        assert r.status_code == 503 and r.json()["error"]["code"] == 503
    finally:
        frontend.terminate()
        frontend.wait(timeout=30)


def test_concurrent_requests_all_complete(client: openai.OpenAI) -> None:
    results: list[str] = []

    def one() -> None:
        r = client.completions.create(model="SmolLM2-135M-Instruct", prompt="The sky is",
                                      max_tokens=8, temperature=0)
        results.append(r.choices[0].text)

    threads = [threading.Thread(target=one) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 16 and len(set(results)) == 1


def test_killed_launcher_takes_its_children_with_it(model_path, tmp_path) -> None:
    """SIGKILL gives `serve` no chance to stop anyone: the kernel's parent-death signal
    (asked for by each child itself) must."""
    srv = start("rust", tmp_path, "--max-model-len", "512")
    children = child_pids(srv.proc.pid)
    assert len(children) == 2  # worker and Rust frontend
    srv.proc.kill()
    srv.proc.wait()
    deadline = time.monotonic() + 60
    while any(running(p) for p in children):
        assert time.monotonic() < deadline, "an orphan outlived its killed launcher"
        time.sleep(0.1)
