"""/openapi.json and schemathesis: both frontends serve the API core's OpenAPI document, which
describes exactly the routes each router is built from; schemathesis then sends every
operation positive and negative examples (a fixed seed, at least 500 cases per frontend, on the
mock engine): no 5xx, every error body in the OpenAI shape, every JSON body valid against the
document's schema of its status, the server healthy afterwards."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable

from tests.launch import Server, start, stop
from tests.openapi_doc import DOC, response_validator
from tests.reliability.conftest import API_KEY, MOCK
from tests.reliability.routes import routes

EXAMPLES = 20  # per operation and mode: 15 operations x 2 modes x 20 = 600 cases
AUTH = {"Authorization": f"Bearer {API_KEY}"}
OPEN = {"/health", "/version", "/load", "/"}


def test_document_describes_every_route() -> None:
    described = {(m.upper(), p) for p, ops in DOC["paths"].items() for m in ops}
    assert described == routes("rust") == routes("python")
    unauthenticated = {p for p, ops in DOC["paths"].items()
                       for op in ops.values() if op.get("security") == []}
    assert unauthenticated == OPEN


@pytest.fixture(scope="module", params=("rust", "python"))
def fuzzed(request: pytest.FixtureRequest, model_path: Path, tmp_path_factory) -> Server:
    # Every generated request is bounded: at most 16 tokens each, whatever it asks for.
    srv = start(request.param, tmp_path_factory.mktemp(request.param), *MOCK,
                "--api-key", API_KEY, "--max-tokens-limit", "16")
    yield srv
    assert stop(srv) == 0


def _is_openai_error(body: object) -> bool:
    if not isinstance(body, dict) or set(body) != {"error"}:
        return False
    e = body["error"]
    return (isinstance(e, dict) and set(e) == {"message", "type", "param", "code"}
            and isinstance(e["message"], str) and e["message"] and isinstance(e["type"], str)
            and (e["param"] is None or isinstance(e["param"], str))
            and isinstance(e["code"], int))


def test_schemathesis(fuzzed: Server) -> None:
    served = httpx.get(fuzzed.url + "/openapi.json", headers=AUTH, timeout=10)
    assert served.status_code == 200 and served.json() == DOC
    schema = schemathesis.openapi.from_dict(served.json())
    statuses: Counter[int] = Counter()
    failures: list[str] = []
    session = httpx.Client(base_url=fuzzed.url, headers=AUTH, timeout=60)

    def send(case: schemathesis.Case) -> None:
        kw = case.as_transport_kwargs(base_url=fuzzed.url, headers=AUTH)
        headers = dict(kw.get("headers") or {})
        if "json" in kw:
            headers.setdefault("Content-Type", "application/json")
        r = session.request(kw["method"], kw["url"], params=kw.get("params"), headers=headers,
                            content=_body(kw))
        statuses[r.status_code] += 1
        where = f"{kw['method']} {kw['url']} {str(kw.get('json', kw.get('data')))[:300]}"
        if r.status_code >= 500:
            failures.append(f"{r.status_code}: {where}: {r.text[:300]}")
        elif r.status_code >= 400 and not (r.status_code == 405 or _is_openai_error(r.json())):
            failures.append(f"not an OpenAI error body: {where}: {r.text[:300]}")
        elif r.headers.get("content-type", "").startswith("application/json"):
            check = response_validator(case.operation.path, case.method, r.status_code)
            errors = [] if check is None else [e.message for e in check.iter_errors(r.json())]
            if errors:
                failures.append(f"{r.status_code} not as documented: {where}: {errors[:3]}: "
                                f"{r.text[:300]}")

    for result in schema.get_all_operations():
        op = result.ok()
        for mode in (schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE):
            @given(case=op.as_strategy(generation_mode=mode))
            @settings(max_examples=EXAMPLES, derandomize=True, database=None, deadline=None,
                      suppress_health_check=list(HealthCheck))
            def run(case: schemathesis.Case) -> None:
                send(case)

            try:
                run()
            except Unsatisfiable:  # nothing to get wrong (GET /health has no input)
                assert mode == schemathesis.GenerationMode.NEGATIVE, op.label
    session.close()
    cases = sum(statuses.values())
    print(f"\n{fuzzed.kind}: {cases} schemathesis cases, statuses {dict(sorted(statuses.items()))}")
    assert failures == [], "\n".join(failures[:20])
    assert cases >= 500
    assert httpx.get(fuzzed.url + "/health", timeout=5).status_code == 200
    ok = httpx.post(fuzzed.url + "/v1/completions", headers=AUTH, timeout=30,
                    json={"prompt": "hi", "max_tokens": 3})
    assert ok.status_code == 200 and ok.json()["usage"]["completion_tokens"] == 3


def _body(kw: dict) -> bytes | None:
    if "json" in kw:
        return json.dumps(kw["json"]).encode()
    data = kw.get("data")
    return data.encode() if isinstance(data, str) else data
