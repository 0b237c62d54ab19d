"""Function tools in the Responses API (#29), both frontends, the official client: `required`
and a named tool are enforced over a quarter of the tool catalog (chat's test_forced_calls
walks all of it through the same grammar), streamed and not (function_call items,
their argument deltas adding up to the item's arguments); a call's output goes back as a
`function_call_output` item, given inline or after `previous_response_id`; built-in tools
and unknown names are refused. (The Agents SDK's Responses model: test_agents_sdk.py.)"""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import openai
import pytest

from tests.tools.catalog import TOOLS, parameters

GROUP = 4
SUBSET = 24  # tools: 6 groups, each asked two ways
ASK = "Please use one of your tools for my request."
KINDS = ["rust", "python"]


def flat(tool: dict[str, Any]) -> dict[str, Any]:
    """A chat tool in the Responses API's shape."""
    return {"type": "function", **tool["function"]}


def _client(s: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=s.url + "/v1", api_key="x", max_retries=0)


def _kw(client: openai.OpenAI, **kw: Any) -> dict[str, Any]:
    return {"model": client.models.list().data[0].id, "input": ASK, "max_output_tokens": 300,
            "temperature": 0, **kw}


def calls_of(output: list[Any]) -> list[tuple[str, str]]:
    return [(o.name, o.arguments) for o in output if o.type == "function_call"]


def streamed(client: openai.OpenAI, **kw: Any) -> tuple[list[tuple[str, str]], Any]:
    """The calls a stream announced, their arguments added up from the deltas, and the final
    response; each call's done event says its whole arguments."""
    added: dict[int, list[str]] = {}
    final = None
    for ev in client.responses.create(stream=True, **kw):
        if ev.type == "response.output_item.added" and ev.item.type == "function_call":
            assert ev.item.status == "in_progress" and ev.item.arguments == ""
            added[ev.output_index] = [ev.item.name, ""]
        elif ev.type == "response.function_call_arguments.delta":
            added[ev.output_index][1] += ev.delta
        elif ev.type == "response.function_call_arguments.done":
            assert ev.arguments == added[ev.output_index][1]
        elif ev.type == "response.completed":
            final = ev.response
    return [(n, a) for _, (n, a) in sorted(added.items())], final


@pytest.mark.parametrize("kind", KINDS)
def test_forced_calls_follow_their_schemas(served: dict, kind: str) -> None:
    client = _client(served[kind])
    by_name = {t["function"]["name"]: parameters(t) for t in TOOLS}
    checked = 0
    for g in range(0, SUBSET, GROUP):
        tools = [flat(t) for t in TOOLS[g:g + GROUP]]
        named = tools[(g // GROUP) % len(tools)]["name"]
        for choice in ("required", {"type": "function", "name": named}):
            kw = _kw(client, tools=tools, tool_choice=choice, parallel_tool_calls=False)
            r = client.responses.create(**kw)
            calls = calls_of(r.output)
            assert len(calls) == 1, r.output
            name, arguments = calls[0]
            assert name in by_name and (choice == "required" or name == named)
            jsonschema.validate(json.loads(arguments), by_name[name])
            assert r.status == "completed" and r.output[0].call_id.startswith("call_")
            if g % (2 * GROUP) == 0:  # half streamed: the same calls
                got, final = streamed(client, **kw)
                assert got == calls and calls_of(final.output) == calls
            checked += 1
    assert checked == 2 * SUBSET // GROUP


WEATHER = {"type": "function", "name": "get_weather", "description": "The weather of a city.",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                          "required": ["city"]}}


@pytest.mark.parametrize("kind", KINDS)
def test_a_call_and_its_output_continue_the_conversation(served: dict, kind: str) -> None:
    client = _client(served[kind])
    first = client.responses.create(**_kw(client, input="What is the weather in Paris?",
                                          tools=[WEATHER], tool_choice="required",
                                          parallel_tool_calls=False, max_output_tokens=60))
    (call,) = [o for o in first.output if o.type == "function_call"]
    result = {"type": "function_call_output", "call_id": call.call_id,
              "output": "21 degrees, sunny"}
    # After previous_response_id: the stored turn holds the call.
    follow = client.responses.create(**_kw(client, input=[result], tools=[WEATHER],
                                           previous_response_id=first.id,
                                           tool_choice="none", max_output_tokens=30))
    assert follow.status in ("completed", "incomplete") and follow.output_text
    assert calls_of(follow.output) == []
    # Inline: the same conversation as items, answered the same way (greedy).
    items = [{"role": "user", "content": "What is the weather in Paris?"},
             {"type": "function_call", "call_id": call.call_id, "name": call.name,
              "arguments": call.arguments}, result]
    inline = client.responses.create(**_kw(client, input=items, tools=[WEATHER],
                                           tool_choice="none", max_output_tokens=30))
    assert inline.output_text == follow.output_text
    listed = client.responses.input_items.list(inline.id)
    assert [i.type for i in listed.data][::-1] == ["message", "function_call",
                                                    "function_call_output"]


@pytest.mark.parametrize("kind", KINDS)
def test_bad_tools_are_refused(served: dict, kind: str) -> None:
    http = served[kind].http

    def error(**body: Any) -> tuple[int, str, str]:
        r = http.post("/v1/responses", json={"input": "hi", **body})
        e = r.json()["error"]
        return r.status_code, e["param"], e["message"]

    assert error(tools=[{"type": "web_search"}]) == (
        400, "tools[0].type",
        "tools[0].type must be \"function\", got \"web_search\": only function tools are "
        "served.")
    assert error(tools=[WEATHER], tool_choice={"type": "function", "name": "nope"})[:2] == (
        400, "tool_choice")
    assert error(tools=[WEATHER], tool_choice={"type": "file_search"}) == (
        400, "tool_choice",
        "tool_choice of type \"file_search\" is not supported: only function tools are "
        "served.")
    assert error(tools=[{"type": "function", "name": "f", "parameters": {"type": "thing"}}]
                 )[:2] == (400, "tools[0].parameters")
    assert error(input=[{"type": "function_call_output", "output": "x"}]) == (
        400, "input", "input[0].call_id must be a string.")
    assert error(tools=[WEATHER], tool_choice="required",
                 text={"format": {"type": "json_object"}})[:2] == (400, "tool_choice")
