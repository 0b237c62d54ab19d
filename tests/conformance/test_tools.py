"""Tool calling through every frontend on a server without tool flags (#29): `required` and
a named tool are enforced (in the Hermes format, as vLLM serves them without flags), `auto`
is refused as vLLM refuses it, a conversation with calls and tool results renders and runs,
and bad tool input is a 400 naming the field."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest

from tests.conformance.conftest import assert_same, parsed

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather of a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "maxLength": 20},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city", "unit"]}}}
NOW = {"type": "function", "function": {"name": "now", "description": "The time."}}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


def _chat(s: Any, **fields: Any) -> tuple[int, Any]:
    body = {"messages": ASK, "temperature": 0, "max_tokens": 60, **fields}
    r = s.http.post("/v1/chat/completions", json=body)
    return r.status_code, parsed(r)


@pytest.mark.parametrize("choice", ["required", {"type": "function",
                                                 "function": {"name": "get_weather"}}])
def test_forced_calls_need_no_flag(servers: dict, choice: Any) -> None:
    answers = {m: _chat(s, tools=[WEATHER, NOW], tool_choice=choice,
                        parallel_tool_calls=False) for m, s in servers.items()}
    assert_same(answers)
    status, body = answers["rust"]
    assert status == 200, body
    c = body["choices"][0]
    assert c["finish_reason"] == "tool_calls"
    assert c["message"]["content"] is None
    (call,) = c["message"]["tool_calls"]
    assert call["id"] == "ID" and call["type"] == "function"
    assert call["function"]["name"] in ("get_weather", "now")
    if isinstance(choice, dict):
        assert call["function"]["name"] == "get_weather"
        jsonschema.validate(json.loads(call["function"]["arguments"]),
                            WEATHER["function"]["parameters"])


def test_a_conversation_with_calls_and_results_runs(servers: dict) -> None:
    messages = [*ASK,
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {
                        "name": "get_weather",
                        "arguments": "{\"city\": \"Paris\", \"unit\": \"celsius\"}"}}]},
                {"role": "tool", "tool_call_id": "call_1", "content": "21 degrees, sunny"}]
    answers = {m: _chat(s, messages=messages, tools=[WEATHER], tool_choice="none")
               for m, s in servers.items()}
    assert_same(answers)
    status, body = answers["rust"]
    assert status == 200, body
    message = body["choices"][0]["message"]
    assert message["content"] and message["tool_calls"] == []
    assert body["choices"][0]["finish_reason"] in ("stop", "length")


BAD: list[tuple[dict[str, Any], str, str]] = [
    ({"tools": [WEATHER], "tool_choice": "auto"}, "tool_choice",
     "\"auto\" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set"),
    ({"tools": [WEATHER]}, "tool_choice",
     "\"auto\" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set"),
    ({"tool_choice": "required"}, "tool_choice",
     "When using `tool_choice`, `tools` must be set."),
    ({"tools": [WEATHER], "tool_choice": "sometimes"}, "tool_choice",
     "`tool_choice` must either be a named tool, \"auto\", \"required\" or \"none\"."),
    ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}},
     "tool_choice",
     "The tool specified in `tool_choice` (\"nope\") does not match any of the specified "
     "`tools`."),
    ({"tools": [WEATHER], "tool_choice": {"type": "function"}}, "tool_choice",
     "Expected field `function` in `tool_choice`. Correct usage: `{\"type\": \"function\", "
     "\"function\": {\"name\": \"my_function\"}}`"),
    ({"tools": [{"type": "web_search"}], "tool_choice": "required"}, "tools[0].type",
     "tools[0].type must be \"function\", got \"web_search\": only function tools are served."),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"x": {"type": "strin"}}}}}], "tool_choice": "required"},
     "tools[0].function.parameters",
     "tools[0].function.parameters.properties.x.type must name JSON types (object, array, "
     "string, number, integer, boolean, null), got \"strin\"."),
    ({"tools": [WEATHER, WEATHER], "tool_choice": "required"}, "tools[1].function.name",
     "tool names must be unique: \"get_weather\" is given twice."),
    ({"tools": [WEATHER], "tool_choice": "required",
      "response_format": {"type": "json_object"}}, "tool_choice",
     "tool_choice cannot force a call together with response_format: both constrain the "
     "output."),
    ({"tools": [WEATHER], "tool_choice": "required", "use_beam_search": True, "n": 2},
     "tool_choice",
     "use_beam_search cannot be combined with structured outputs (tool_choice)."),
    ({"messages": [*ASK, {"role": "tool", "content": "21"}], "tools": [WEATHER],
      "tool_choice": "none"}, "messages[1].tool_call_id",
     "messages[1].tool_call_id is required: a tool message answers a call by its id."),
    ({"functions": [{"name": "f"}]}, "functions",
     "functions is not supported: OpenAI's deprecated function calling is not served; use "
     "tools and tool_choice."),
]


def test_bad_tool_input_is_a_400_naming_the_field(servers: dict) -> None:
    for fields, param, message in BAD:
        answers = {m: _chat(s, **fields) for m, s in servers.items()}
        assert_same(answers)
        status, body = answers["rust"]
        assert status == 400, (fields, body)
        assert (body["error"]["param"], body["error"]["message"]) == (param, message), fields
    for s in servers.values():
        assert s.http.get("/health").status_code == 200
