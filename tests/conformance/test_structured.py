"""Structured outputs through every frontend (#28): each form of constraint (OpenAI's
`response_format`, vLLM's `structured_outputs` and `guided_*`, the Responses API's
`text.format`) holds on what comes out, the official client's `parse` helpers return parsed
objects, streamed text equals the body, the three frontends answer alike and with the offline
engine's output, and what llguidance cannot enforce is a 400 naming the field."""

from __future__ import annotations

import json
import re
from typing import Any

import jsonschema
import openai
import pytest
from pydantic import BaseModel, Field

from hybridllm import LLM, SamplingParams, StructuredOutputsParams
from tests.conformance.conftest import (
    API_KEY,
    ENGINE_FLAGS,
    MAX_MODEL_LEN,
    assert_same,
    parse_sse,
    parsed,
)


class Person(BaseModel):
    name: str = Field(max_length=12)
    age: int = Field(ge=0, le=150)


PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 12},
                   "age": {"type": "integer", "minimum": 0, "maximum": 150}},
    "required": ["name", "age"],
    "additionalProperties": False,
}
CODE = r"[A-Z]{2}-[0-9]{3}"
ASK_PERSON = [{"role": "user", "content": "Give me a person as JSON"}]


def _client(s: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=s.url + "/v1", api_key=API_KEY, max_retries=0)


def _chat(s: Any, content: str, **fields: Any) -> dict:
    body = {"messages": [{"role": "user", "content": content}], "temperature": 0,
            "max_tokens": 48, **fields}
    return parsed(s.http.post("/v1/chat/completions", json=body))


def test_chat_parse_returns_the_pydantic_object(servers: dict) -> None:
    contents = {}
    for mode, s in servers.items():
        client = _client(s)
        r = client.chat.completions.parse(
            model=client.models.list().data[0].id, messages=ASK_PERSON,  # type: ignore[arg-type]
            response_format=Person, temperature=0, max_tokens=48)
        choice = r.choices[0]
        assert choice.finish_reason == "stop", mode
        assert isinstance(choice.message.parsed, Person), mode
        jsonschema.validate(json.loads(choice.message.content or ""), PERSON)
        contents[mode] = choice.message.content
    assert len(set(contents.values())) == 1, contents


def test_each_form_holds_and_every_frontend_answers_alike(servers: dict) -> None:
    cases: list[tuple[str, dict[str, Any], Any]] = [
        ("Give me a person as JSON",
         {"response_format": {"type": "json_schema",
                              "json_schema": {"name": "person", "schema": PERSON}}},
         lambda t: jsonschema.validate(json.loads(t), PERSON)),
        ("Return {\"ok\": true} as JSON.", {"response_format": {"type": "json_object"}},
         lambda t: isinstance(json.loads(t), dict) or pytest.fail(t)),
        ("Give me a JSON object with a key 'color'.",
         {"structured_outputs": {"json_object": True, "disable_any_whitespace": True}},
         lambda t: " " not in t and "\n" not in t and isinstance(json.loads(t), dict)
         or pytest.fail(t)),
        ("A product code please", {"structured_outputs": {"regex": CODE}},
         lambda t: re.fullmatch(CODE, t) or pytest.fail(t)),
        ("Is the sky blue?", {"guided_choice": ["yes", "no"]},
         lambda t: t in ("yes", "no") or pytest.fail(t)),
        ("Is water wet?",
         {"structured_outputs": {"grammar": 'start: "The answer is " ANSWER "."\n'
                                            'ANSWER: "yes" | "no"'}},
         lambda t: re.fullmatch(r"The answer is (yes|no)\.", t) or pytest.fail(t)),
        ("Give me a person as JSON", {"guided_json": json.dumps(PERSON)},
         lambda t: jsonschema.validate(json.loads(t), PERSON)),
    ]
    for content, fields, check in cases:
        answers = {mode: _chat(s, content, **fields) for mode, s in servers.items()}
        assert_same(answers)
        choice = answers["rust"]["choices"][0]
        assert choice["finish_reason"] == "stop", (fields, choice)
        check(choice["message"]["content"])


def test_completions_n_and_seed(servers: dict) -> None:
    body = {"prompt": "The weather today is", "max_tokens": 8, "n": 3, "seed": 7,
            "temperature": 1.0, "guided_choice": ["sunny", "rainy", "cold"]}
    answers = {m: parsed(s.http.post("/v1/completions", json=body)) for m, s in servers.items()}
    assert_same(answers)
    texts = [c["text"] for c in answers["rust"]["choices"]]
    assert len(texts) == 3 and set(texts) <= {"sunny", "rainy", "cold"}, texts
    again = parsed(servers["rust"].http.post("/v1/completions", json=body))
    assert [c["text"] for c in again["choices"]] == texts


def test_streamed_text_equals_the_body(servers: dict) -> None:
    fields = {"response_format": {"type": "json_schema",
                                  "json_schema": {"name": "person", "schema": PERSON}}}
    for mode, s in servers.items():
        body = _chat(s, "Give me a person as JSON", **fields)
        r = s.http.post("/v1/chat/completions", json={
            "messages": ASK_PERSON, "temperature": 0, "max_tokens": 48, "stream": True,
            **fields})
        assert r.status_code == 200, r.text
        chunks = [c for c in parse_sse(r.content) if c != "[DONE]"]
        text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
        assert text == body["choices"][0]["message"]["content"], mode
        assert chunks[-1]["choices"][0]["finish_reason"] == "stop", mode


def test_the_offline_engine_gives_the_same_output(servers: dict, model_path) -> None:
    llm = LLM(model=str(model_path), max_model_len=MAX_MODEL_LEN,
              kv_cache_memory=int(ENGINE_FLAGS[3]))
    params = SamplingParams(temperature=0, max_tokens=48,
                            structured_outputs=StructuredOutputsParams(json=PERSON))
    offline = llm.chat(ASK_PERSON, params, use_tqdm=False)[0].outputs[0].text
    served = _chat(servers["rust"], "Give me a person as JSON", guided_json=PERSON)
    assert served["choices"][0]["message"]["content"] == offline


def test_responses_text_format_and_parse(servers: dict) -> None:
    fmt = {"type": "json_schema", "name": "person", "schema": PERSON, "strict": True}
    outputs = {}
    for mode, s in servers.items():
        r = s.http.post("/v1/responses", json={
            "input": "Give me a person as JSON", "temperature": 0, "max_output_tokens": 48,
            "text": {"format": fmt}, "store": False})
        body = parsed(r)
        assert body["text"] == {"format": fmt}, mode  # echoed as asked
        text = body["output"][0]["content"][0]["text"]
        jsonschema.validate(json.loads(text), PERSON)
        outputs[mode] = text
        client = _client(s)
        p = client.responses.parse(model=client.models.list().data[0].id,
                                   input="Give me a person as JSON", text_format=Person,
                                   temperature=0, max_output_tokens=48, store=False)
        assert isinstance(p.output_parsed, Person), mode
    assert len(set(outputs.values())) == 1, outputs


REFUSED: list[tuple[dict[str, Any], str, str]] = [
    ({"response_format": {"type": "json_schema",
                          "json_schema": {"name": "x", "schema": {"type": "nonsense"}}}},
     "response_format.json_schema.schema",
     "response_format.json_schema.schema cannot be enforced: Invalid type: nonsense."),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}},
     "response_format.json_schema.schema", "response_format.json_schema.schema is required."),
    ({"guided_json": {"type": "string", "minLength": 5, "maxLength": 2}}, "guided_json",
     "guided_json cannot be enforced: Unsatisfiable schema: minLength (5) is greater than "
     "maxLength (2)."),
    ({"guided_json": "{"}, "guided_json",
     "guided_json is not valid JSON: EOF while parsing an object at line 1 column 1."),
    ({"structured_outputs": {"regex": "a", "choice": ["b"]}}, "structured_outputs",
     "structured_outputs must set exactly one of json, regex, choice, grammar or json_object, "
     "got regex, choice."),
    ({"structured_outputs": {"choice": []}}, "structured_outputs.choice",
     "structured_outputs.choice must be a non-empty list of strings."),
    ({"guided_regex": "a", "response_format": {"type": "json_object"}}, "guided_regex",
     "only one output constraint may be set per request, got response_format and "
     "guided_regex."),
    ({"guided_choice": ["a", "b"], "use_beam_search": True, "n": 2}, "guided_choice",
     "use_beam_search cannot be combined with structured outputs (guided_choice)."),
    ({"guided_decoding_backend": "xgrammar", "guided_regex": "a"}, "guided_decoding_backend",
     "guided_decoding_backend must be one of auto, guidance, llguidance, got \"xgrammar\"."),
    ({"structured_outputs": {"grammar": "start: x"}}, "structured_outputs.grammar",
     "structured_outputs.grammar cannot be enforced: at 1(8): unknown name: \"x\"\n"
     "   1 | start: x\n              ^."),
]


@pytest.mark.parametrize("case", range(len(REFUSED)))
def test_what_cannot_be_enforced_is_a_400_naming_the_field(servers: dict, case: int) -> None:
    fields, param, message = REFUSED[case]
    for mode, s in servers.items():
        r = s.http.post("/v1/chat/completions", json={"messages": ASK_PERSON, **fields})
        assert r.status_code == 400, (mode, r.text)
        assert r.json()["error"] == {"message": message, "type": "BadRequestError",
                                     "param": param, "code": 400}, mode


def test_a_grammar_the_vocabulary_cannot_spell_is_a_400(servers: dict) -> None:
    """U+815C3's first UTF-8 byte (F2) is no token of SmolLM2's vocabulary: after "u\\x8a" the
    grammar reaches a dead end (llguidance's mask still lets one byte token through, which
    the matcher then refuses). The request's fault: a 400 naming structured_outputs, not a
    500, and the server goes on serving."""
    for mode, s in servers.items():
        for stream in (False, True):
            r = s.http.post("/v1/chat/completions", json={
                "messages": ASK_PERSON, "max_tokens": 16, "stream": stream,
                "structured_outputs": {"regex": "u\u008a\U000815c3z"}})
            if stream:
                assert r.status_code == 200, (mode, r.text)
                error = json.loads(r.text.split("data: ")[-2])["error"]
            else:
                assert r.status_code == 400, (mode, r.text)
                error = r.json()["error"]
            assert error["param"] == "structured_outputs" and error["code"] == 400, (mode, error)
            assert error["message"].startswith(
                "structured_outputs: the output left the grammar at token 219: "), error
        ok = s.http.post("/v1/chat/completions", json={"messages": ASK_PERSON, "max_tokens": 2})
        assert ok.status_code == 200
