"""The OpenAI Agents SDK (`openai-agents`) runs an agent with one function tool against each
frontend, over chat completions and over the Responses API: the first turn is forced with
tool_choice "required", the tool runs, and its result goes back to the model, which
answers."""

from __future__ import annotations

import asyncio

import pytest
from agents import (
    Agent,
    ModelSettings,
    OpenAIChatCompletionsModel,
    OpenAIResponsesModel,
    Runner,
    function_tool,
    set_tracing_disabled,
)
from agents.items import ToolCallOutputItem
from openai import AsyncOpenAI

set_tracing_disabled(True)  # no network here: the SDK would upload traces


@pytest.mark.parametrize("api", [OpenAIChatCompletionsModel, OpenAIResponsesModel],
                         ids=["chat", "responses"])
@pytest.mark.parametrize("kind", ["rust", "python"])
def test_an_agent_calls_its_tool_and_uses_the_result(served: dict, kind: str,
                                                     api: type) -> None:
    calls: list[str] = []

    @function_tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        calls.append(city)
        return f"It is 21 degrees and sunny in {city}."

    async def run() -> object:
        client = AsyncOpenAI(base_url=served[kind].url + "/v1", api_key="x", max_retries=0)
        model_name = (await client.models.list()).data[0].id
        agent = Agent(
            name="weather", instructions="Answer with the weather tool.",
            tools=[get_weather],
            model=api(model=model_name, openai_client=client),
            # Forced on the first turn; the SDK sets it back to auto after the call.
            model_settings=ModelSettings(tool_choice="required", temperature=0,
                                         max_tokens=60, parallel_tool_calls=False))
        return await Runner.run(agent, "What is the weather in Paris?", max_turns=4)

    result = asyncio.run(run())
    assert len(calls) == 1 and calls[0], calls
    outputs = [i for i in result.new_items if isinstance(i, ToolCallOutputItem)]
    assert [o.output for o in outputs] == [f"It is 21 degrees and sunny in {calls[0]}."]
    # The tool's result reached the model: a second model call answered after it.
    assert len(result.raw_responses) == 2
    assert isinstance(result.final_output, str) and result.final_output
