"""500 malformed or unenforceable output constraints (tests/structured/bad_inputs.py: wrong
types, invalid and unsatisfiable schemas, bad regexes, grammars and choices, two constraints at
once, beam search, inputs of megabytes and hundreds of levels), sent to each frontend while
good constrained requests run: each is a 400 naming its field, the good ones end exactly as
they do alone, and the server is healthy after (#28's must-show)."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from tests.conformance.test_structured import ASK_PERSON as ASK
from tests.conformance.test_structured import PERSON
from tests.launch import Server
from tests.structured.bad_inputs import bad_constraints

GOOD = {"messages": ASK, "temperature": 0, "max_tokens": 40, "guided_json": PERSON}
FIELDS = {"response_format", "structured_outputs", "guided_json", "guided_regex",
          "guided_choice", "guided_grammar", "guided_decoding_backend"}


async def _run(s: Server) -> tuple[dict[str, tuple[int, Any]], list[str], str]:
    async with httpx.AsyncClient(base_url=s.url, timeout=300) as http:
        alone = (await http.post("/v1/chat/completions", json=GOOD)).json()
        want = alone["choices"][0]["message"]["content"]
        gate = asyncio.Semaphore(16)
        answers: dict[str, tuple[int, Any]] = {}

        async def bad(label: str, fields: dict) -> None:
            async with gate:
                r = await http.post("/v1/chat/completions",
                                    json={"messages": ASK, "max_tokens": 8, **fields})
            answers[label] = (r.status_code, r.json())

        async def good() -> str:
            r = await http.post("/v1/chat/completions", json=GOOD)
            return r.json()["choices"][0]["message"]["content"]

        goods = [asyncio.create_task(good()) for _ in range(8)]
        await asyncio.gather(*(bad(label, fields) for label, fields in bad_constraints()))
        others = list(await asyncio.gather(*goods))
        assert (await http.get("/health")).status_code == 200
        others.append(await good())
        return answers, others, want


@pytest.mark.parametrize("kind", ["rust", "python"])
def test_each_bad_constraint_is_a_400_naming_its_field(served: dict, kind: str) -> None:
    answers, others, want = asyncio.run(_run(served[kind]))
    assert len(answers) == 500
    wrong = {label: a for label, a in answers.items()
             if a[0] != 400 or a[1]["error"]["type"] != "BadRequestError"}
    assert not wrong, wrong
    unnamed = []
    for label, (_, body) in answers.items():
        error = body["error"]
        if error["message"].startswith("Invalid JSON body: recursion limit exceeded"):
            # Nested past the JSON reader's 128 levels: the body is refused before any
            # field is read (the schemas nested 300 deep).
            unnamed.append(label)
            continue
        param = error["param"] or ""
        assert param.split(".")[0].split("[")[0] in FIELDS, (label, error)
        assert len(error["message"]) > len(param), (label, error)
    assert all(label.startswith("huge/") and "nested_300" in label for label in unnamed)
    # Every good request answered as it does alone, during and after the flood.
    assert others == [want] * 9


@pytest.mark.parametrize("kind", ["rust", "python"])
def test_structured_outputs_config_sets_the_limits(
    tmp_path_factory: pytest.TempPathFactory, model_path, kind: str
) -> None:
    """vLLM's --structured-outputs-config reaches the core in both frontends; a backend that
    is not served fails the start, naming the flag."""
    from tests.launch import start, stop
    from tests.structured.conftest import FLAGS

    config = '{"backend": "guidance", "max_bytes": 64, "disable_any_whitespace": true}'
    s = start(kind, tmp_path_factory.mktemp(kind), *FLAGS, "--structured-outputs-config",
              config, model=model_path, env={"HYBRIDLLM_LOG": "warn"})
    try:
        r = s.http.post("/v1/chat/completions", json={
            "messages": ASK, "max_tokens": 8, "guided_regex": "a" * 65})
        assert r.status_code == 400
        assert r.json()["error"]["message"] == "guided_regex must be at most 64 bytes, got 65."
        body = s.http.post("/v1/chat/completions", json={
            "messages": [{"role": "user", "content": "Return {\"ok\": true} as JSON."}],
            "max_tokens": 16, "temperature": 0,
            "response_format": {"type": "json_object"}}).json()
        text = body["choices"][0]["message"]["content"]
        assert " " not in text and "\n" not in text, text  # no whitespace between tokens
    finally:
        stop(s)
    with pytest.raises(RuntimeError, match="structured-outputs-config"):
        start(kind, tmp_path_factory.mktemp(kind), *FLAGS, "--structured-outputs-config",
              '{"backend": "xgrammar"}', model=model_path, timeout=120)
