"""The OpenAPI document (the API core's, what both frontends serve) against the suite's own
requests, no server needed: every body the servers answer with 200 is valid against its
operation's schema, and every body they refuse for its shape (not an object, a mistyped or
missing field) or for a bound the document states is invalid against it."""

from __future__ import annotations

import json

import pytest

from tests.conformance import test_beam_search, test_endpoints, test_generation, test_responses
from tests.conformance.test_embeddings import BODIES as EMBEDDINGS
from tests.conformance.test_errors import CASES as ERRORS
from tests.conformance.test_errors import DESERIALIZER, NOT_OBJECT, Foreign
from tests.openapi_doc import request_validator

ANSWERED = [
    *test_generation.CASES,
    *test_beam_search.CASES,
    *[("/v1/responses", body) for body in test_responses.CASES],
    *[("/v1/embeddings", body) for body in EMBEDDINGS],
    *[("/tokenize", body) for body in test_endpoints.TOKENIZE],
    ("/detokenize", test_endpoints.DETOKENIZE),
]


# As the generation tests also send them: streamed, with the usage.
STREAMED = {"/v1/chat/completions": {"stream": True, "stream_options": {"include_usage": True}},
            "/v1/completions": {"stream": True, "stream_options": {"include_usage": True}},
            "/v1/responses": {"stream": True}}


@pytest.mark.parametrize("case", ANSWERED, ids=[f"{i}" for i in range(len(ANSWERED))])
def test_answered_bodies_are_valid(case: tuple[str, dict]) -> None:
    path, body = case
    for sent in (body, {**body, **STREAMED.get(path, {})}):
        errors = [e.message for e in request_validator(path).iter_errors(sent)]
        assert errors == [], (path, sent, errors)


def _whole_float(raw: str) -> bool:
    """A float literal of a whole value: JSON Schema's `integer` takes it, serde's i64 not."""
    found: list[bool] = []
    json.loads(raw, parse_float=lambda s: found.append(float(s).is_integer()) or float(s))
    return any(found)


def _refused_for_shape_or_bound(message: object) -> bool:
    return (message == NOT_OBJECT
            or isinstance(message, Foreign) and message.kind == DESERIALIZER
            or isinstance(message, str) and " must be in [" in message
            or isinstance(message, str) and " must be in (" in message)


REFUSED = [(path, raw) for path, raw, status, message in ERRORS
           if status == 400 and _refused_for_shape_or_bound(message)
           and path in ("/v1/chat/completions", "/v1/completions", "/tokenize", "/detokenize")
           and not _whole_float(raw)]


@pytest.mark.parametrize("case", REFUSED, ids=[f"{i}" for i in range(len(REFUSED))])
def test_refused_bodies_are_invalid(case: tuple[str, str]) -> None:
    path, raw = case
    assert not request_validator(path).is_valid(json.loads(raw)), (path, raw)


def test_the_table_has_both_kinds() -> None:
    assert len(ANSWERED) > 40 and len(REFUSED) > 30
