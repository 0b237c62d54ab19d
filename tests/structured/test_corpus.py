"""Structured outputs on real schemas (#28's must-show): the 400 JSONSchemaBench schemas of
tests/data/jsonschemabench (40 from each of its 10 sub-sets), offline and through both
frontends with the official `openai` client. Every output that ends with `stop` validates
against its schema (jsonschema), and the schemas llguidance refuses are refused alike
everywhere: offline as the request's ValueError, served as a 400 naming the field with
llguidance's reason. The counts are printed (`pytest -s`)."""

from __future__ import annotations

import asyncio
import collections
import json
import re
from pathlib import Path

import jsonschema
import openai
import pytest

from hybridllm import LLM, SamplingParams, StructuredOutputsParams
from hybridllm.entrypoints.offline_loop import run_to_completion
from tests.launch import Server
from tests.structured.corpus import load_corpus

CORPUS = load_corpus()
PROMPT = "Reply with one JSON value that fits the schema."
MAX_TOKENS = 64


def _valid(schema: dict, text: str) -> None:
    """jsonschema's check, with the draft the schema names (draft 7 when it names none)."""
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft7Validator)
    cls(schema, format_checker=None).validate(json.loads(text))


class Tally:
    """Per sub-set counts of how each schema ended: refused, stop (validated) or length."""

    def __init__(self, where: str) -> None:
        self.where = where
        self.counts: dict[str, collections.Counter[str]] = collections.defaultdict(
            collections.Counter)
        self.refused: dict[str, str] = {}

    def add(self, subset: str, key: str, how: str, text: str, schema: dict) -> None:
        if how == "refused":
            self.refused[key] = text
        elif how == "stop":
            _valid(schema, text)  # every output that ends with stop: 100 %
        self.counts[subset][how] += 1

    def report(self) -> None:
        total: collections.Counter[str] = collections.Counter()
        for subset, c in sorted(self.counts.items()):
            total.update(c)
            print(f"{self.where:>10} {subset:<16} {dict(sorted(c.items()))}")
        print(f"{self.where:>10} {'all':<16} {dict(sorted(total.items()))}")
        reasons = collections.Counter(_reason(m) for m in self.refused.values())
        print(f"{self.where:>10} refusals by reason: {dict(reasons.most_common())}")
        assert sum(total.values()) == len(CORPUS)
        # Most of the corpus is served, and a good part of it ends within MAX_TOKENS.
        assert total["stop"] + total["length"] >= 0.85 * len(CORPUS), total
        assert total["stop"] >= 0.25 * len(CORPUS), total


def _reason(message: str) -> str:
    """The kind of refusal, without the values: llguidance's message up to its first colon
    after the field's prefix."""
    tail = message.split("cannot be enforced: ", 1)[-1]
    return re.sub(r"[\"'`].*", "", tail.split(":")[0])[:60]


@pytest.fixture(scope="module")
def offline(model_path: Path) -> Tally:
    llm = LLM(model=str(model_path), max_model_len=512, max_num_seqs=64,
              kv_cache_memory=256 << 20)
    engine = llm.engine
    # The chat prompt's ids, as LLM.chat renders them.
    ids = llm.chat([{"role": "user", "content": PROMPT}], SamplingParams(max_tokens=1),
                   use_tqdm=False)[0].prompt_token_ids
    tally = Tally("offline")
    started = []
    for i, (subset, key, schema) in enumerate(CORPUS):
        params = SamplingParams(temperature=0, max_tokens=MAX_TOKENS,
                                structured_outputs=StructuredOutputsParams(json=schema))
        try:
            engine.add_request(f"c{i}", list(ids), params)
        except ValueError as e:
            tally.add(subset, key, "refused", str(e), schema)
            continue
        started.append((i, f"c{i}"))
    outputs = run_to_completion(engine, [rid for _, rid in started], False)
    for (i, _), out in zip(started, outputs):
        subset, key, schema = CORPUS[i]
        o = out.outputs[0]
        tally.add(subset, key, o.finish_reason, o.text, schema)
    return tally


async def _serve_all(s: Server) -> Tally:
    client = openai.AsyncOpenAI(base_url=s.url + "/v1", api_key="x", max_retries=0,
                                timeout=600)
    model = (await client.models.list()).data[0].id
    tally = Tally(s.kind)
    gate = asyncio.Semaphore(48)

    async def one(subset: str, key: str, schema: dict) -> None:
        fmt = {"type": "json_schema",
               "json_schema": {"name": re.sub(r"[^A-Za-z0-9_-]", "_", key)[:64],
                               "schema": schema}}
        async with gate:
            try:
                r = await client.chat.completions.create(
                    model=model, messages=[{"role": "user", "content": PROMPT}],
                    temperature=0, max_tokens=MAX_TOKENS,
                    response_format=fmt)  # type: ignore[arg-type]
            except openai.BadRequestError as e:
                err = e.body if isinstance(e.body, dict) else {}
                assert err.get("param") == "response_format.json_schema.schema", err
                tally.add(subset, key, "refused", str(err.get("message")), schema)
                return
        c = r.choices[0]
        tally.add(subset, key, c.finish_reason, c.message.content or "", schema)

    await asyncio.gather(*(one(*row) for row in CORPUS))
    await client.close()
    return tally


def test_offline_outputs_validate(offline: Tally) -> None:
    offline.report()


@pytest.mark.parametrize("kind", ["rust", "python"])
def test_served_outputs_validate_and_refusals_match_offline(
    served: dict, offline: Tally, kind: str
) -> None:
    tally = asyncio.run(_serve_all(served[kind]))
    tally.report()
    # The API core (Rust crate) and the engine (Python wheel) run the same llguidance.
    assert sorted(tally.refused) == sorted(offline.refused)
    assert served[kind].http.get("/health").status_code == 200
    # Each refusal says why in llguidance's words, after the field's name.
    for message in tally.refused.values():
        assert message.startswith("response_format.json_schema.schema "), message
