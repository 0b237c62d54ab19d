"""The chat endpoint's tool-call parsers for offline outputs: `LLM.chat(messages, tools=...)`
renders the tools, and `parse_tool_calls(output.text, "hermes")` reads the calls the way the
server reads them (the parsers live in the API core)."""

from __future__ import annotations

from dataclasses import dataclass, field

from hybridllm import _api

PARSERS = ("hermes", "llama3_json", "pythonic", "mistral")


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: str  # JSON text, as the chat endpoint returns it


@dataclass(frozen=True)
class ParsedToolCalls:
    content: str
    calls: list[ToolCall] = field(default_factory=list)


def parse_tool_calls(text: str, parser: str = "hermes") -> ParsedToolCalls:
    """The content and calls of a whole output; ValueError for a parser not in PARSERS."""
    content, calls = _api.parse_tool_calls(parser, text)
    return ParsedToolCalls(content, [ToolCall(n, a) for n, a in calls])
