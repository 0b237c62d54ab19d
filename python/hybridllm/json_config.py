"""A JSON-object setting given as a dict (`LLM(...)`) or its JSON text (a serve flag), as
vLLM's `--speculative-config` and `--pooler-config` take them."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any


def json_object(value: dict[str, Any] | str, name: str, allowed: Sequence[str]) -> dict[str, Any]:
    """`value` as a dict with only `allowed` keys; ValueError naming `name` otherwise."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as e:
            raise ValueError(f"{name} is not valid JSON: {e}") from None
    if not isinstance(value, dict):
        raise ValueError(f"{name} must be a JSON object (a dict), got {type(value).__name__}")
    unknown = sorted(set(value) - set(allowed))
    if unknown:
        raise ValueError(f"{name}: unknown field(s) {', '.join(unknown)}; "
                         f"allowed: {', '.join(allowed)}")
    return value
