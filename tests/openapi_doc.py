"""The API core's OpenAPI document (`hybridllm._api.openapi_json`, what both frontends serve)
and validators of its schemas: jsonschema_rs, the validator schemathesis itself uses."""

from __future__ import annotations

import json

import jsonschema_rs

from hybridllm import _api

DOC = json.loads(_api.openapi_json())


def validator(schema: dict) -> jsonschema_rs.Draft202012Validator:
    """Validates against one schema of the document (its `$ref`s resolve in the document)."""
    return jsonschema_rs.Draft202012Validator({**schema, "components": DOC["components"]})


def request_validator(path: str) -> jsonschema_rs.Draft202012Validator:
    body = DOC["paths"][path]["post"]["requestBody"]
    return validator(body["content"]["application/json"]["schema"])


def response_validator(path: str, method: str,
                       status: int) -> jsonschema_rs.Draft202012Validator | None:
    """The JSON body's validator of that answer; None where the document names none."""
    answer = DOC["paths"][path][method.lower()]["responses"].get(str(status), {})
    schema = answer.get("content", {}).get("application/json", {}).get("schema")
    return None if schema is None else validator(schema)
