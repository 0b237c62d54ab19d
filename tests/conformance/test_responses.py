"""POST /v1/responses in every frontend: the same response object and the same named events
for the same greedy request, the same refusals, and the stored responses (retrieve, input
items, continue with previous_response_id, delete) through the official openai client."""

from __future__ import annotations

import time
from typing import Any

import openai
import pytest

from tests.conformance.conftest import (
    API_KEY,
    MAX_MODEL_LEN,
    assert_equal,
    assert_same,
    normalise,
    parse_named_sse,
    parsed,
)

R = "/v1/responses"
Q = "What is the capital of France?"
EVENTS = ["response.created", "response.in_progress", "response.output_item.added",
          "response.content_part.added"]
TAIL = ["response.output_text.done", "response.content_part.done",
        "response.output_item.done"]
LONG = "The quick brown fox jumps over the lazy dog. " * 25  # ~250 tokens

CASES: list[dict[str, Any]] = [
    {"input": Q, "max_output_tokens": 12, "temperature": 0},
    {"input": [{"role": "user", "content": "Hi"}], "instructions": "Answer in one word.",
     "max_output_tokens": 8, "temperature": 0, "metadata": {"run": "conformance"},
     "user": "u-1", "store": False},
    {"input": [{"type": "message", "role": "developer",
                "content": [{"type": "input_text", "text": "Reply in French."}]},
               {"role": "user", "content": [{"type": "input_text", "text": "Hello"},
                                            {"type": "input_text", "text": "there"}]}],
     "max_output_tokens": 6, "temperature": 0},
    {"input": [{"role": "user", "content": "Hi"},
               {"role": "assistant", "content": [{"type": "output_text", "text": "Hello!"}]},
               {"role": "user", "content": Q}], "max_output_tokens": 10, "temperature": 0},
    # Ends on EOS well before the limit: status completed.
    {"input": "Say OK.", "max_output_tokens": 64, "temperature": 0},
    {"input": "Write a word", "max_output_tokens": 8, "temperature": 0.8, "top_p": 0.9,
     "seed": 7},
    {"input": "List three colors, one per line.", "max_output_tokens": 30, "temperature": 0,
     "stop": ["\n"]},
    {"input": "Count:", "max_output_tokens": 5, "temperature": 0, "ignore_eos": True},
    # Too long together: auto truncation drops the oldest turns.
    {"input": [{"role": "user", "content": LONG}, {"role": "assistant", "content": "Yes."},
               {"role": "user", "content": Q}], "truncation": "auto",
     "max_output_tokens": MAX_MODEL_LEN - 200, "temperature": 0},
    # Echoed as given (with no tools they ask for nothing more).
    {"input": Q, "max_output_tokens": 4, "temperature": 0, "service_tier": "flex",
     "parallel_tool_calls": False, "max_tool_calls": 3, "prompt_cache_key": "tenant-7"},
]


@pytest.mark.parametrize("stream", [False, True], ids=["full", "stream"])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_same_answer(servers: dict, case: int, stream: bool) -> None:
    body = {**CASES[case], "stream": stream}
    results = {}
    for mode, s in servers.items():
        r = s.post(R, body)
        assert r.status_code == 200, (mode, r.text)
        if not stream:
            assert r.headers["content-type"] == "application/json"
            results[mode] = parsed(r)
            continue
        assert r.headers["content-type"] == "text/event-stream; charset=utf-8"
        events = parse_named_sse(r.content)
        names = [n for n, _ in events]
        deltas = names.count("response.output_text.delta")
        assert deltas >= 1, (mode, names)
        assert names == EVENTS + ["response.output_text.delta"] * deltas + TAIL + [
            "response.incomplete" if events[-1][1]["response"]["status"] == "incomplete"
            else "response.completed"], (mode, names)
        for i, (name, data) in enumerate(events):
            assert data["type"] == name and data["sequence_number"] == i, (mode, i, data)
        done = events[-1][1]["response"]
        text = "".join(d["delta"] for n, d in events if n == "response.output_text.delta")
        assert done["output"][0]["content"][0]["text"] == text
        results[mode] = events
    assert_same(results)


def test_stream_equals_full(servers: dict) -> None:
    """The streamed response's last event carries the same object as the full answer."""
    body = {**CASES[0], "max_output_tokens": 3}
    for mode, s in servers.items():
        full = parsed(s.post(R, body))
        done = parse_named_sse(s.post(R, {**body, "stream": True}).content)[-1][1]["response"]
        assert_equal(done, full, where=mode)
        assert full["status"] == "incomplete"
        assert full["incomplete_details"] == {"reason": "max_output_tokens"}
        assert full["usage"]["output_tokens"] == 3
        assert full["output"][0]["status"] == "incomplete"


ERRORS: list[tuple[dict[str, Any], str | None]] = [
    # background needs store (vLLM's check) and is not streamed here.
    ({"background": True, "store": False}, "background"),
    ({"background": True, "stream": True}, "stream"),
    # Tools imply tool_choice "auto", which needs vLLM's tool flags (these servers have none).
    ({"tools": [{"type": "function", "name": "f", "parameters": {}}]}, "tool_choice"),
    ({"tools": [{"type": "web_search"}]}, "tools[0].type"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"tool_choice": {"type": "function", "name": "f"}}, "tool_choice"),
    ({"reasoning": {"effort": "high"}}, "reasoning"),
    ({"text": {"format": {"type": "json_schema", "name": "x"}}}, "text.format.schema"),
    ({"text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": "nonsense"}}}},
     "text.format.schema"),
    ({"text": {"format": {"type": "xml"}}}, "text.format"),
    ({"text": "plain"}, "text"),
    # Only the message's logprobs are served; top_logprobs alone would be ignored.
    ({"include": ["reasoning.encrypted_content"]}, "include"),
    ({"include": ["message.output_text.logprobs", 5]}, "include"),
    ({"top_logprobs": 2}, "top_logprobs"),
    ({"include": ["message.output_text.logprobs"], "top_logprobs": 21}, "top_logprobs"),
    ({"prompt": {"id": "pmpt_1"}}, "prompt"),
    ({"conversation": "conv_1"}, "conversation"),
    ({"truncation": "middle"}, "truncation"),
    ({"metadata": {str(i): "v" for i in range(17)}}, "metadata"),
    ({"metadata": {"k" * 65: "v"}}, "metadata"),
    ({"metadata": {"k": 1}}, "metadata"),
    ({"metadata": {"k": "v" * 513}}, "metadata"),
    ({"max_output_tokens": 0}, "max_output_tokens"),
    ({"max_output_tokens": MAX_MODEL_LEN}, None),  # prompt + output beyond the window
    ({"temperature": 2.5}, "temperature"),
    ({"top_p": 0}, "top_p"),
    ({"input": []}, "input"),
    ({"input": 5}, "input"),
    ({"input": [5]}, "input"),
    ({"input": [{"type": "file_search_call", "id": "c"}]}, "input"),
    ({"input": [{"role": "tool", "content": "x"}]}, "input"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
     "input"),
    ({"input": [{"role": "user", "content": 5}]}, "input"),
    ({"input": [{"role": "user", "content": LONG * 3}]}, None),  # truncation disabled
    ({"model": "no-such-model"}, None),
    ({"service_tier": "gold"}, "service_tier"),
    ({"max_tool_calls": 0}, "max_tool_calls"),
    ({"request_id": ""}, "request_id"),
    ({"request_id": "r" * 513}, "request_id"),
    ({"enable_response_messages": True}, "enable_response_messages"),
    ({"previous_response": {"id": "resp_1", "output": []}}, "previous_response"),
]


@pytest.mark.parametrize("case", range(len(ERRORS)))
def test_refusals(servers: dict, case: int) -> None:
    extra, param = ERRORS[case]
    body = {"input": "Hi", "max_output_tokens": 4, **extra}
    results = {}
    for mode, s in servers.items():
        r = s.post(R, body)
        assert r.status_code == (404 if "model" in extra else 400), (mode, r.text)
        err = parsed(r)["error"]
        assert err["param"] == param, (mode, err)
        results[mode] = err
    assert_same(results)


def test_echoed_fields(servers: dict) -> None:
    """service_tier, parallel_tool_calls, max_tool_calls and prompt_cache_key come back as
    sent (vLLM's and OpenAI's response object), streamed and not; their defaults otherwise."""
    sent = {"service_tier": "priority", "parallel_tool_calls": False, "max_tool_calls": 2,
            "prompt_cache_key": "k-1"}
    default = {"service_tier": "auto", "parallel_tool_calls": True, "max_tool_calls": None,
               "prompt_cache_key": None}
    for mode, s in servers.items():
        for extra, want in ((sent, sent), ({}, default)):
            body = parsed(s.post(R, {"input": "Hi", "max_output_tokens": 2, **extra}))
            assert {k: body[k] for k in want} == want, (mode, body)
            events = parse_named_sse(s.post(R, {"input": "Hi", "max_output_tokens": 2,
                                                "stream": True, **extra}).content)
            last = events[-1][1]["response"]
            assert {k: last[k] for k in want} == want, (mode, last)


def test_request_id_names_the_response(servers: dict) -> None:
    """vLLM's request_id is the response's id as given, streamed and stored; an id a stored
    response has is refused (never replaced), and a request without one gets resp_<hex>."""
    for mode, s in servers.items():
        rid = f"conformance-{mode}-1"
        body = parsed(s.post(R, {"input": "Hi", "max_output_tokens": 2, "request_id": rid}))
        assert body["id"] == rid, mode
        assert s.http.get(f"{R}/{rid}").json()["id"] == rid
        again = s.post(R, {"input": "Hi", "max_output_tokens": 2, "request_id": rid})
        assert again.status_code == 400 and again.json()["error"] == {
            "message": "request_id names a stored response: choose another.",
            "type": "BadRequestError", "param": "request_id", "code": 400}, mode
        rid2 = f"conformance-{mode}-2"
        events = parse_named_sse(s.post(R, {"input": "Hi", "max_output_tokens": 2,
                                            "stream": True, "request_id": rid2}).content)
        assert {e[1]["response"]["id"] for e in events if "response" in e[1]} == {rid2}
        # Not stored: the id may be used again.
        for _ in range(2):
            r = s.post(R, {"input": "Hi", "max_output_tokens": 1, "store": False,
                           "request_id": f"conformance-{mode}-3"})
            assert r.status_code == 200 and r.json()["id"] == f"conformance-{mode}-3"
        assert s.post(R, {"input": "Hi", "max_output_tokens": 1}).json()["id"].startswith(
            "resp_")


def test_unknown_ids_are_404(servers: dict) -> None:
    missing = "resp_" + "0" * 32
    for mode, s in servers.items():
        for method in ("GET", "DELETE"):
            r = s.http.request(method, f"{R}/{missing}")
            assert r.status_code == 404, (mode, method)
            assert r.json() == {"error": {
                "message": f"Response with id '{missing}' not found.", "type": "NotFoundError",
                "param": None, "code": 404}}
        r = s.post(R, {"input": "Hi", "previous_response_id": missing})
        assert r.status_code == 404
        assert r.json()["error"]["message"] == f"Previous response with id '{missing}' not found."


def test_openai_client_store_and_continue(servers: dict) -> None:
    """Non-stream and stream give the same greedy text; the second turn's prompt holds the
    first turn (counted through /tokenize) but not its instructions; retrieve, input items
    and delete work; store=False responses cannot be retrieved or continued."""
    seen = {}
    for mode, s in servers.items():
        client = openai.OpenAI(base_url=s.url + "/v1", api_key=API_KEY, max_retries=0)
        first = client.responses.create(input=Q, instructions="Answer briefly.",
                                        max_output_tokens=16, temperature=0)
        events = list(client.responses.create(input=Q, instructions="Answer briefly.",
                                              max_output_tokens=16, temperature=0,
                                              stream=True))
        numbers = [e.sequence_number for e in events]
        assert numbers == list(range(len(events)))
        assert events[-1].type in ("response.completed", "response.incomplete")
        streamed = "".join(e.delta for e in events if e.type == "response.output_text.delta")
        assert streamed == first.output_text and first.output_text
        second = client.responses.create(input="And of Germany?", previous_response_id=first.id,
                                         max_output_tokens=8, temperature=0)
        conversation = [{"role": "user", "content": Q},
                        {"role": "assistant", "content": first.output_text},
                        {"role": "user", "content": "And of Germany?"}]
        count = s.post("/tokenize", {"messages": conversation}).json()["count"]
        assert second.usage.input_tokens == count, mode
        assert second.previous_response_id == first.id
        got = client.responses.retrieve(first.id)
        assert got.output_text == first.output_text and got.id == first.id
        items = client.responses.input_items.list(second.id)
        assert [(i.role, i.content[0].text) for i in items.data] == [("user", "And of Germany?")]
        client.responses.delete(first.id)
        with pytest.raises(openai.NotFoundError):
            client.responses.retrieve(first.id)
        unstored = client.responses.create(input="Hi", max_output_tokens=2, store=False)
        with pytest.raises(openai.NotFoundError):
            client.responses.retrieve(unstored.id)
        with pytest.raises(openai.NotFoundError):
            client.responses.create(input="Hi", previous_response_id=unstored.id)
        seen[mode] = (first.output_text, second.output_text, second.usage.input_tokens)
    assert len(set(seen.values())) == 1, seen


def test_input_items_pages(servers: dict) -> None:
    """order (desc by default), limit and after over one response's own items."""
    msgs = [{"role": "user", "content": f"m{i}"} for i in range(5)]
    pages = {}
    for mode, s in servers.items():
        rid = s.post(R, {"input": msgs, "max_output_tokens": 1}).json()["id"]
        desc = s.http.get(f"{R}/{rid}/input_items").json()
        texts = [i["content"][0]["text"] for i in desc["data"]]
        assert texts == ["m4", "m3", "m2", "m1", "m0"] and desc["has_more"] is False
        page = s.http.get(f"{R}/{rid}/input_items",
                          params={"order": "asc", "limit": 2}).json()
        assert [i["content"][0]["text"] for i in page["data"]] == ["m0", "m1"]
        assert page["has_more"] is True and page["last_id"] == page["data"][1]["id"]
        rest = s.http.get(f"{R}/{rid}/input_items",
                          params={"order": "asc", "after": page["last_id"]}).json()
        assert [i["content"][0]["text"] for i in rest["data"]] == ["m2", "m3", "m4"]
        bad = [s.http.get(f"{R}/{rid}/input_items", params=p) for p in
               ({"order": "up"}, {"limit": "0"}, {"limit": "x"}, {"after": "msg_none"})]
        pages[mode] = (normalise(desc), [(b.status_code, b.json()) for b in bad])
    assert_same(pages)



def test_auto_truncation_drops_the_oldest_turns(servers: dict) -> None:
    """Too long as a whole: refused with truncation disabled; with auto, the first turn is
    dropped and the prompt is exactly the remaining turns."""
    turns = CASES[8]["input"]
    body = {"input": turns, "max_output_tokens": MAX_MODEL_LEN - 200, "temperature": 0}
    for mode, s in servers.items():
        assert s.post(R, body).status_code == 400, mode
        r = s.post(R, {**body, "truncation": "auto"}).json()
        kept = s.post("/tokenize", {"messages": turns[1:]}).json()["count"]
        whole = s.post("/tokenize", {"messages": turns}).json()["count"]
        assert r["usage"]["input_tokens"] == kept < whole, mode
        assert r["truncation"] == "auto"


LOGPROBS = "message.output_text.logprobs"


def test_output_logprobs_as_vllm(servers: dict) -> None:
    """include ["message.output_text.logprobs"] with top_logprobs (vLLM main, responses/
    serving.py at 0001948b and streaming_events.py at 01e4fce0): the response object's
    output_text carries one entry per output token, {token, logprob, bytes, top_logprobs}, the
    top_logprobs being vLLM's logprobs dict in order (the sampled token first) cut to
    top_logprobs; each streamed output_text.delta carries its tokens' entries without bytes;
    top_logprobs is echoed. The tokens and logprobs are chat's for the same conversation."""
    body = {"input": Q, "max_output_tokens": 6, "temperature": 0, "include": [LOGPROBS],
            "top_logprobs": 2, "store": False}
    chat_body = {"messages": [{"role": "user", "content": Q}], "max_tokens": 6,
                 "temperature": 0, "logprobs": True, "top_logprobs": 2}
    seen = {}
    for mode, s in servers.items():
        r = s.post(R, body)
        assert r.status_code == 200, (mode, r.text)
        v = r.json()
        assert v["top_logprobs"] == 2
        (part,) = v["output"][0]["content"]
        lps = part["logprobs"]
        assert len(lps) == v["usage"]["output_tokens"] == 6, (mode, lps)
        chat = s.post("/v1/chat/completions", chat_body).json()["choices"][0]
        assert chat["message"]["content"] == part["text"], mode
        # Greedy: chat's top two are the sampled token and the next, as vLLM's dict lists them.
        assert_equal(lps, chat["logprobs"]["content"], 1e-4, mode)
        for e in lps:
            assert e["bytes"] == list(e["token"].encode())
            assert [t["token"] for t in e["top_logprobs"]][0] == e["token"]
        assert "".join(e["token"] for e in lps) == part["text"]
        events = parse_named_sse(s.post(R, {**body, "stream": True}).content)
        deltas = [d for n, d in events if n == "response.output_text.delta"]
        streamed = [e for d in deltas for e in d["logprobs"]]
        assert_equal(streamed, [{"token": e["token"], "logprob": e["logprob"],
                                 "top_logprobs": [{"token": t["token"], "logprob": t["logprob"]}
                                                  for t in e["top_logprobs"]]} for e in lps],
                     1e-4, mode)
        done = events[-1][1]["response"]
        assert done["top_logprobs"] == 2
        assert_equal(done["output"][0]["content"][0]["logprobs"], lps, 1e-4, mode)
        # Without include: no logprobs anywhere, top_logprobs null.
        plain = s.post(R, {**body, "include": [], "top_logprobs": 0}).json()
        assert plain["top_logprobs"] is None
        assert "logprobs" not in plain["output"][0]["content"][0]
        # top_logprobs 0: each entry's alternatives are empty (vLLM's `if top_logprobs`).
        zero = s.post(R, {**body, "top_logprobs": 0}).json()
        assert [e["top_logprobs"] for e in zero["output"][0]["content"][0]["logprobs"]] == (
            [[]] * 6)
        seen[mode] = [(e["token"], round(e["logprob"], 3)) for e in lps]
    assert len({str(v) for v in seen.values()}) == 1, seen


def _poll(s: Any, rid: str, timeout: float = 60) -> dict[str, Any]:
    """The stored response once it is no longer queued or in progress."""
    deadline = time.monotonic() + timeout
    while True:
        got = s.http.get(f"{R}/{rid}")
        assert got.status_code == 200, got.text
        v = got.json()
        if v["status"] not in ("queued", "in_progress"):
            return v
        assert time.monotonic() < deadline, v
        time.sleep(0.05)


def test_background_poll_and_cancel(servers: dict) -> None:
    """background true (vLLM main, responses/serving.py at 0001948b): answered at once as
    queued (no output, no usage), polled with GET to the foreground answer; cancel of one
    queued or in progress answers it cancelled and it stays so; cancelling a finished or a
    foreground response is vLLM's 400, an unknown id a 404; GET stream=true is refused."""
    body = {"input": Q, "max_output_tokens": 8, "temperature": 0}
    sync_error = {"message": "Cannot cancel a synchronous response.",
                  "type": "BadRequestError", "param": "response_id", "code": 400}
    seen = {}
    for mode, s in servers.items():
        client = openai.OpenAI(base_url=s.url + "/v1", api_key=API_KEY, max_retries=0)
        fg = s.post(R, body).json()
        q = s.post(R, {**body, "background": True}).json()
        assert (q["status"], q["background"], q["output"], q["usage"]) == (
            "queued", True, [], None), (mode, q)
        done = _poll(s, q["id"])
        assert (done["status"], done["background"]) == (fg["status"], True), (mode, done)
        assert done["output"][0]["content"] == fg["output"][0]["content"], mode
        counts = ("input_tokens", "output_tokens", "total_tokens")  # cache hits differ
        assert [done["usage"][k] for k in counts] == [fg["usage"][k] for k in counts], mode
        for rid in (q["id"], fg["id"]):
            r = s.post(f"{R}/{rid}/cancel")
            assert (r.status_code, r.json()) == (400, {"error": sync_error}), (mode, r.text)
        missing = "resp_" + "0" * 32
        r = s.post(f"{R}/{missing}/cancel")
        assert r.status_code == 404 and r.json()["error"]["message"] == (
            f"Response with id '{missing}' not found."), mode
        r = s.http.get(f"{R}/{q['id']}", params={"stream": "true"})
        assert r.status_code == 400 and r.json()["error"]["param"] == "stream", mode
        # A long one, cancelled while it runs (the openai client's background and cancel).
        long = client.responses.create(input="Count to one thousand.", max_output_tokens=400,
                                       temperature=0, background=True,
                                       extra_body={"ignore_eos": True})
        assert long.status == "queued"
        cancelled = client.responses.cancel(long.id)
        assert (cancelled.id, cancelled.status, cancelled.output) == (long.id, "cancelled", [])
        time.sleep(0.5)
        got = client.responses.retrieve(long.id)
        assert (got.status, got.output, got.usage) == ("cancelled", [], None), mode
        with pytest.raises(openai.BadRequestError):
            client.responses.cancel(long.id)
        seen[mode] = done["output"][0]["content"][0]["text"]
    assert len(set(seen.values())) == 1, seen


def test_reasoning_input_items_are_ignored(servers: dict) -> None:
    """A reasoning item handed back in input (as the Agents SDK does) is accepted and, with
    no reasoning parser, not rendered (vLLM main drops it from the prompt too): the same
    prompt and answer as without it; it is listed among the input items."""
    reasoning = {"type": "reasoning", "id": "rs_1", "summary": [],
                 "content": [{"type": "reasoning_text", "text": "The user asks for a city."}]}
    turns = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"},
             {"role": "user", "content": Q}]
    body = {"max_output_tokens": 8, "temperature": 0}
    for mode, s in servers.items():
        plain = s.post(R, {**body, "input": turns}).json()
        r = s.post(R, {**body, "input": [*turns[:1], reasoning, *turns[1:]]})
        assert r.status_code == 200, (mode, r.text)
        v = r.json()
        assert v["output"][0]["content"] == plain["output"][0]["content"], mode
        assert v["usage"]["input_tokens"] == plain["usage"]["input_tokens"], mode
        items = s.http.get(f"{R}/{v['id']}/input_items", params={"order": "asc"}).json()
        assert [i["type"] for i in items["data"]] == ["message", "reasoning", "message",
                                                      "message"], mode
        assert items["data"][1] == reasoning, mode
