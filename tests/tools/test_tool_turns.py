"""The model's own calls with `tool_choice` "auto" (a server with --enable-auto-tool-choice
and the Hermes parser): read into tool_calls, streamed and not, equal to the byte; the model's
text is forced to a fixture with a one-item guided_choice, as the bundled model rarely calls
tools on its own. `auto` with a `strict` tool: free text untouched, a call the model opens
held to the tool's schema. And a
full Hermes round trip: call, tool result, answer."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import openai
import pytest

from tests.tools.test_forced_calls import streamed_calls

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather of a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}
NOW = {"type": "function", "function": {"name": "now", "description": "The time.",
                                        "parameters": {"type": "object", "properties": {}}}}
ASK = [{"role": "user", "content": "What is the weather in Paris, and the time?"}]
# Text, then two calls in one turn, the second with empty arguments.
FIXTURE = ("Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
           "{\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"now\", "
           "\"arguments\": {}}\n</tool_call>")


def _client(s: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=s.url + "/v1", api_key="x", max_retries=0)


@pytest.mark.parametrize("kind", ["rust", "python"])
@pytest.mark.parametrize("parallel", [True, False])
def test_auto_reads_the_models_calls(served: dict, kind: str, parallel: bool) -> None:
    client = _client(served[kind])
    kw: dict[str, Any] = dict(
        model=client.models.list().data[0].id, messages=ASK, tools=[WEATHER, NOW],
        tool_choice="auto", parallel_tool_calls=parallel, max_tokens=120, temperature=0,
        extra_body={"guided_choice": [FIXTURE]})
    r = client.chat.completions.create(**kw)
    want = [("get_weather", "{\"city\": \"Paris\"}"), ("now", "{}")][:2 if parallel else 1]
    m = r.choices[0].message
    assert (m.content, r.choices[0].finish_reason) == ("Let me look.\n", "tool_calls")
    assert [(c.function.name, c.function.arguments) for c in m.tool_calls or []] == want
    assert all(c.id.startswith("chatcmpl-tool-") and c.type == "function"
               for c in m.tool_calls or [])
    content, finish, calls = streamed_calls(client.chat.completions.create(stream=True, **kw))
    assert (content, finish, calls) == ("Let me look.\n", "tool_calls", want)


@pytest.mark.parametrize("kind", ["rust", "python"])
def test_auto_without_a_call_is_text(served: dict, kind: str) -> None:
    client = _client(served[kind])
    r = client.chat.completions.create(
        model=client.models.list().data[0].id, messages=ASK, tools=[WEATHER, NOW],
        max_tokens=60, temperature=0, extra_body={"guided_choice": ["It is sunny."]})
    m = r.choices[0].message
    assert (m.content, m.tool_calls, r.choices[0].finish_reason) == (
        "It is sunny.", [], "stop")  # vLLM answers an empty list too


# A tool whose schema the model's own call does not follow: upper-case cities, a required unit.
CITY = {"type": "object", "required": ["city", "unit"], "properties": {
    "city": {"type": "string", "enum": ["PARIS", "ROME", "OSLO"]},
    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}}


def _weather(strict: bool) -> dict[str, Any]:
    return {"type": "function", "function": {"name": "get_weather", "strict": strict,
                                             "description": "The weather of a city.",
                                             "parameters": CITY}}


def _asked(city: str, i: int) -> list[dict[str, Any]]:
    return [{"role": "user", "content": f"Weather in {city}?"},
            {"role": "assistant", "content": "", "tool_calls": [{
                "id": f"call_{i}", "type": "function", "function": {
                    "name": "get_weather", "arguments": json.dumps({"city": city})}}]},
            {"role": "tool", "tool_call_id": f"call_{i}", "content": "Sunny."}]


# Two earlier turns that called the tool; the model, on its own, calls it again.
FEW_SHOT = [*_asked("Paris", 1), *_asked("Oslo", 2),
            {"role": "user", "content": "Weather in Rome?"}]


def _no_response_tag(http: Any) -> dict[str, int]:
    """A logit bias that bans the token which turns `<tool_` into `<tool_response>`: the
    135M model imitates the rendered tool results; banned, it writes `<tool_call>`."""
    ids = {t: http.post("/tokenize", json={"prompt": t}).json()["tokens"]
           for t in ("<tool_response>", "<tool_call>")}
    return {str(t): -100 for t in ids["<tool_response>"] if t not in ids["<tool_call>"]}


def test_auto_holds_the_calls_of_strict_tools_to_their_schema(served: dict) -> None:
    calls = {}
    for kind, server in served.items():
        client = _client(server)
        kw: dict[str, Any] = dict(model=client.models.list().data[0].id, messages=FEW_SHOT,
                                  tool_choice="auto", max_tokens=80, temperature=0,
                                  logit_bias=_no_response_tag(server.http))
        loose = client.chat.completions.create(tools=[_weather(False)], **kw)
        ((name, args),) = [(c.function.name, c.function.arguments)
                           for c in loose.choices[0].message.tool_calls or []]
        assert name == "get_weather"
        with pytest.raises(jsonschema.ValidationError):  # the fixture's point
            jsonschema.validate(json.loads(args), CITY)
        strict = client.chat.completions.create(tools=[_weather(True)], **kw)
        m = strict.choices[0].message
        ((name, args),) = [(c.function.name, c.function.arguments) for c in m.tool_calls or []]
        assert (name, m.content, strict.choices[0].finish_reason) == (
            "get_weather", None, "tool_calls")
        jsonschema.validate(json.loads(args), CITY)
        streamed = streamed_calls(client.chat.completions.create(
            stream=True, tools=[_weather(True)], **kw))
        assert streamed == ("", "tool_calls", [(name, args)]), kind
        # Free text is the model's own, token for token, strict or not.
        text = [client.chat.completions.create(
            model=kw["model"], messages=[{"role": "user", "content": "Weather in Rome?"}],
            tools=[_weather(s)], max_tokens=30, temperature=0).choices[0].message.content
            for s in (False, True)]
        assert text[0] == text[1] and text[0], kind
        calls[kind] = (name, args)
    assert calls["rust"] == calls["python"]


@pytest.mark.parametrize("kind", ["rust", "python"])
def test_a_hermes_round_trip(served: dict, kind: str) -> None:
    """Forced call, the tool's result as the next message, the model's answer."""
    client = _client(served[kind])
    model = client.models.list().data[0].id
    first = client.chat.completions.create(
        model=model, messages=ASK, tools=[WEATHER], max_tokens=60, temperature=0,
        tool_choice={"type": "function", "function": {"name": "get_weather"}})
    (call,) = first.choices[0].message.tool_calls or []
    city = json.loads(call.function.arguments)["city"]
    messages = [*ASK, first.choices[0].message.model_dump(exclude_none=True),
                # No `name`, as OpenAI clients send it: the call's id gives it to the template.
                {"role": "tool", "tool_call_id": call.id,
                 "content": f"In {city}: 21 degrees and sunny."}]
    second = client.chat.completions.create(model=model, messages=messages, tools=[WEATHER],
                                            tool_choice="none", max_tokens=40, temperature=0)
    assert second.choices[0].message.content
    assert second.choices[0].message.tool_calls == []
    # The conversation the template rendered holds the call and the result.
    http = served[kind].http
    tok = http.post("/tokenize", json={"messages": messages, "tools": [WEATHER]}).json()
    prompt = http.post("/detokenize", json={"tokens": tok["tokens"]}).json()["prompt"]
    assert "<tool_call>" in prompt and '"get_weather"' in prompt
    assert f"In {city}: 21 degrees and sunny." in prompt


def test_offline_chat_renders_tools_and_its_output_parses(served: dict, model_path) -> None:
    """`LLM.chat(tools=...)` renders the tools as the server does, and `parse_tool_calls` reads
    its output as the server reads the same output."""
    from hybridllm import LLM, SamplingParams, StructuredOutputsParams
    from hybridllm.text.tool_calls import ParsedToolCalls, ToolCall, parse_tool_calls
    from tests.tools.conftest import HERMES_TEMPLATE

    llm = LLM(model=str(model_path), max_model_len=1024, kv_cache_memory=128 << 20)
    params = SamplingParams(temperature=0, max_tokens=120,
                            structured_outputs=StructuredOutputsParams(choice=[FIXTURE]))
    out = llm.chat(ASK, params, chat_template=HERMES_TEMPLATE.read_text(),
                   tools=[WEATHER, NOW], use_tqdm=False)[0]
    parsed = parse_tool_calls(out.outputs[0].text, "hermes")
    assert parsed == ParsedToolCalls("Let me look.\n", [
        ToolCall("get_weather", "{\"city\": \"Paris\"}"), ToolCall("now", "{}")])
    http = served["rust"].http
    served_ids = http.post("/tokenize", json={"messages": ASK, "tools": [WEATHER, NOW]}).json()
    assert out.prompt_token_ids == served_ids["tokens"]
    with pytest.raises(ValueError, match="unknown tool-call parser"):
        parse_tool_calls("x", "nope")
