"""`tool_choice` "required" and a named tool are enforced: over a hundred tool definitions,
in both frontends, streamed and not, every response's calls name one of the request's tools
and their arguments validate against its schema (the official client, the bundled model)."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import jsonschema
import openai
import pytest

from tests.tools.catalog import TOOLS, parameters

GROUP = 4  # tools per request: 25 requests cover the catalog, each asked four ways
MESSAGES = [{"role": "user", "content": "Please use one of your tools for my request."}]


def cases(parallel: bool = False) -> list[dict[str, Any]]:
    """Per group of tools: "required" and a named tool, streamed and not (`parallel`:
    "required" with parallel calls allowed, streamed and not, on the first 24 tools)."""
    out = []
    for g in range(0, 24 if parallel else len(TOOLS), GROUP):
        tools = TOOLS[g:g + GROUP]
        named = tools[(g // GROUP) % GROUP]["function"]["name"]
        for stream in (False, True):
            out.append({"tools": tools, "tool_choice": "required", "stream": stream,
                        "parallel_tool_calls": parallel})
            if not parallel:
                out.append({"tools": tools, "stream": stream,
                            "tool_choice": {"type": "function", "function": {"name": named}}})
    return out


def streamed_calls(stream: Any) -> tuple[str, str | None, list[tuple[str, str]]]:
    """A streamed answer read as the client sees it: its content, finish reason and calls;
    each call's first delta carries its index, id, type and name, later ones only arguments."""
    content, finish, calls = "", None, {}
    for chunk in stream:
        if not chunk.choices:
            continue
        c = chunk.choices[0]
        content += c.delta.content or ""
        finish = c.finish_reason or finish
        for d in c.delta.tool_calls or []:
            if d.index not in calls:
                assert d.id and d.type == "function" and d.function.name, d
                calls[d.index] = [d.function.name, d.function.arguments or ""]
            else:
                assert d.id is None and d.function.name is None, d
                calls[d.index][1] += d.function.arguments or ""
    assert sorted(calls) == list(range(len(calls)))
    return content, finish, [tuple(calls[i]) for i in sorted(calls)]


def ask(client: openai.OpenAI, case: dict[str, Any]) -> tuple[str, str | None, list]:
    kw = dict(model=client.models.list().data[0].id, messages=MESSAGES, max_tokens=300,
              temperature=0, **case)
    if case["stream"]:
        return streamed_calls(client.chat.completions.create(**kw))
    r = client.chat.completions.create(**kw)
    m = r.choices[0].message
    assert len({c.id for c in m.tool_calls or []}) == len(m.tool_calls or [])
    return (m.content or "", r.choices[0].finish_reason,
            [(c.function.name, c.function.arguments) for c in m.tool_calls or []])


@pytest.mark.parametrize("kind", ["rust", "python"])
def test_every_forced_call_is_valid(served: dict, kind: str) -> None:
    client = openai.OpenAI(base_url=served[kind].url + "/v1", api_key="x", max_retries=0)
    todo = cases()
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda c: ask(client, c), todo))
    failures = []
    for case, (content, finish, calls) in zip(todo, answers, strict=True):
        schemas = {t["function"]["name"]: parameters(t) for t in case["tools"]}
        named = isinstance(case["tool_choice"], dict)
        try:
            assert finish == "tool_calls", finish
            assert content == "", content
            assert calls, "no call"
            if named or not case.get("parallel_tool_calls", True):
                assert len(calls) == 1, calls
            if named:
                assert calls[0][0] == case["tool_choice"]["function"]["name"]
            for name, arguments in calls:
                jsonschema.validate(json.loads(arguments), schemas[name])
        except (AssertionError, KeyError, ValueError, jsonschema.ValidationError) as e:
            failures.append((case["tool_choice"], case["stream"], calls, repr(e)[:200]))
    print(f"{kind}: {len(todo) - len(failures)}/{len(todo)} responses valid over "
          f"{len(TOOLS)} tools")
    assert not failures, failures[:5]


@pytest.mark.parametrize("kind", ["rust", "python"])
def test_parallel_calls_are_each_valid(served: dict, kind: str) -> None:
    """With parallel calls allowed the grammar allows any number of calls: the bundled model
    sometimes repeats calls until max_tokens, so the last call of a turn cut there may be
    cut too; every other call is valid."""
    client = openai.OpenAI(base_url=served[kind].url + "/v1", api_key="x", max_retries=0)
    todo = cases(parallel=True)
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda c: ask(client, c), todo))
    several = 0
    for case, (content, finish, calls) in zip(todo, answers, strict=True):
        schemas = {t["function"]["name"]: parameters(t) for t in case["tools"]}
        assert content == "" and calls, (content, calls)
        assert finish in ("tool_calls", "length"), finish
        whole = calls if finish == "tool_calls" else calls[:-1]
        for name, arguments in whole:
            jsonschema.validate(json.loads(arguments), schemas[name])
        several += len(calls) > 1
    print(f"{kind}: {len(todo)} parallel turns, {several} with several calls")
