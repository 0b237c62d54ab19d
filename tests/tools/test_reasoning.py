"""`--reasoning-parser qwen3` through both frontends (#29), with the official client: a reply
whose prompt opens its reasoning span (a thinking template) is reasoning until `</think>`; one
whose prompt closed the span (`enable_thinking: false`) is content; streamed as not streamed;
`include_reasoning: false` drops it; a JSON schema applies only after the span. The reference
is the model's raw text for the same prompt from /v1/completions, where no parser applies.
The split at `</think>`, cut at every position, is tested on fixtures in the core
(crates/hybridllm-api/src/reasoning.rs, chat.rs)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import openai
import pytest

from tests.launch import Server, both_frontends

THINK_TEMPLATE = (Path(__file__).resolve().parents[1] / "data" / "chat_templates"
                  / "think_chatml.jinja")
FLAGS = ["--max-model-len", "2048", "--max-num-seqs", "8", "--kv-cache-memory", str(128 << 20),
         "--chat-template", str(THINK_TEMPLATE), "--reasoning-parser", "qwen3"]
QUESTION = "Why is the sky blue?"
ASK = [{"role": "user", "content": QUESTION}]
OPEN = f"<|im_start|>user\n{QUESTION}<|im_end|>\n<|im_start|>assistant\n<think>\n"
CLOSED = f"<|im_start|>user\n{QUESTION}<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
TOKENS = 24


@pytest.fixture(scope="module")
def thinking(tmp_path_factory: pytest.TempPathFactory,
             model_path: Path) -> Iterator[dict[str, Server]]:
    yield from both_frontends(tmp_path_factory.mktemp, model_path, *FLAGS)


def _client(s: Server) -> openai.OpenAI:
    return openai.OpenAI(base_url=s.url + "/v1", api_key="x", max_retries=0)


def _raw(client: openai.OpenAI, prompt: str, **kw: Any) -> str:
    """The model's greedy text after `prompt`, unparsed."""
    r = client.completions.create(model=client.models.list().data[0].id, prompt=prompt,
                                  max_tokens=TOKENS, temperature=0,
                                  extra_body={"add_special_tokens": False}, **kw)
    return r.choices[0].text


def _expected(raw: str, opened: bool) -> tuple[str | None, str | None]:
    """(reasoning, content) of a raw reply, as vLLM's qwen3 parser splits it."""
    if not opened:
        return None, raw
    reasoning, end, content = raw.partition("</think>")
    return reasoning, (content or None) if end else None


def _chat(client: openai.OpenAI, opened: bool, **kw: Any) -> dict[str, Any]:
    extra = {"chat_template_kwargs": {"enable_thinking": opened}, **kw.pop("extra_body", {})}
    return {"model": client.models.list().data[0].id, "messages": ASK, "max_tokens": TOKENS,
            "temperature": 0, "extra_body": extra, **kw}


def _streamed(client: openai.OpenAI, **kw: Any) -> tuple[str | None, str | None, str]:
    """The concatenated reasoning and content deltas (None when none came) and the finish."""
    reasoning: list[str] = []
    content: list[str] = []
    finish = ""
    for chunk in client.chat.completions.create(stream=True, **kw):
        for c in chunk.choices:
            d = c.delta
            if (r := (d.model_extra or {}).get("reasoning")) is not None:
                reasoning.append(r)
            if d.content:
                content.append(d.content)
            finish = c.finish_reason or finish
    return "".join(reasoning) or None, "".join(content) or None, finish


@pytest.mark.parametrize("opened", [True, False], ids=["thinking", "not-thinking"])
def test_the_reply_splits_at_its_reasoning(thinking: dict[str, Server], opened: bool) -> None:
    answers = {}
    for kind, server in thinking.items():
        client = _client(server)
        raw = _raw(client, OPEN if opened else CLOSED)
        want = _expected(raw, opened)
        kw = _chat(client, opened)
        r = client.chat.completions.create(**kw)
        m = r.choices[0].message
        got = ((m.model_extra or {}).get("reasoning", "absent"), m.content)
        assert got == want, (kind, raw)
        assert "reasoning" in (m.model_extra or {})  # null, not absent, with a parser
        assert _streamed(client, **kw) == (*want, r.choices[0].finish_reason), kind
        answers[kind] = got
    assert answers["rust"] == answers["python"]
    if opened:
        assert answers["rust"][0], "the thinking reply has reasoning"


def test_include_reasoning_false_drops_it(thinking: dict[str, Server]) -> None:
    for kind, server in thinking.items():
        client = _client(server)
        _, content = _expected(_raw(client, OPEN), True)
        kw = _chat(client, True, extra_body={"include_reasoning": False})
        m = client.chat.completions.create(**kw).choices[0].message
        assert ((m.model_extra or {}).get("reasoning", "absent"), m.content) == (None, content)
        assert _streamed(client, **kw)[:2] == (None, content), kind


SCHEMA = {"type": "object", "properties": {"answer": {"type": "string", "maxLength": 40}},
          "required": ["answer"], "additionalProperties": False}
JSON_FORMAT = {"type": "json_schema", "json_schema": {"name": "a", "schema": SCHEMA}}


def test_a_schema_applies_after_the_reasoning(thinking: dict[str, Server]) -> None:
    for kind, server in thinking.items():
        client = _client(server)
        # The span is free: its text is the model's own, token for token.
        raw = _raw(client, OPEN)
        assert "</think>" not in raw, "the fixture needs a reply that keeps thinking"
        kw = _chat(client, True, response_format=JSON_FORMAT)
        r = client.chat.completions.create(**kw)
        m = r.choices[0].message
        assert ((m.model_extra or {})["reasoning"], m.content) == (raw, None), kind
        assert r.choices[0].finish_reason == "length"
        # With the span closed in the prompt, the reply is the schema's.
        kw = _chat(client, False, response_format=JSON_FORMAT, max_tokens=60)
        r = client.chat.completions.create(**kw)
        m = r.choices[0].message
        assert (m.model_extra or {})["reasoning"] is None, kind
        jsonschema.validate(json.loads(m.content or ""), SCHEMA)
        assert r.choices[0].finish_reason == "stop"


def test_responses_carry_the_reasoning_as_an_item(thinking: dict[str, Server]) -> None:
    """/v1/responses: the span is a `reasoning` item before any message (here the whole
    reply, cut at max_output_tokens); streamed, its text arrives as reasoning_text deltas;
    handed back as input on the next turn, the item is accepted and not rendered."""
    outputs = {}
    for kind, server in thinking.items():
        client = _client(server)
        raw = _raw(client, OPEN)
        assert "</think>" not in raw, "the fixture needs a reply that keeps thinking"
        kw = {"model": client.models.list().data[0].id, "input": QUESTION,
              "max_output_tokens": TOKENS, "temperature": 0}
        r = client.responses.create(**kw)
        assert r.status == "incomplete", kind
        assert [i.type for i in r.output] == ["reasoning"], kind
        item = r.output[0]
        assert item.id.startswith("rs_") and item.summary == [], kind
        assert [(c.type, c.text) for c in item.content or []] == [("reasoning_text", raw)]
        assert r.output_text == ""
        events = list(client.responses.create(stream=True, **kw))
        names = [e.type for e in events]
        assert names == ["response.created", "response.in_progress",
                         "response.output_item.added", "response.content_part.added",
                         *["response.reasoning_text.delta"] * (len(names) - 8),
                         "response.reasoning_text.done", "response.content_part.done",
                         "response.output_item.done", "response.incomplete"], kind
        deltas = "".join(e.delta for e in events if e.type == "response.reasoning_text.delta")
        assert deltas == raw == events[-4].text, kind
        last = events[-1].response
        assert [(i.type, i.content) for i in last.output] == [(i.type, i.content)
                                                             for i in r.output], kind
        # The next turn hands the whole output back, as the Agents SDK does.
        follow = client.responses.create(
            **{**kw, "input": [{"role": "user", "content": QUESTION}, *[
                i.model_dump(exclude_none=True) for i in r.output],
                {"role": "user", "content": "Say it shorter."}]})
        assert follow.output[0].type == "reasoning", kind
        outputs[kind] = [(i.type, i.content) for i in r.output]
    assert outputs["rust"] == outputs["python"]
