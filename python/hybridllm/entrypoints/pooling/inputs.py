"""The input of an embedding call, checked as OpenAI's `input` field is: one string, a list of
token ids, or a list of either (at most 2,048), nothing empty. Errors name the field and limit.
"""

from __future__ import annotations

from typing import Any

MAX_EMBEDDING_INPUTS = 2048

EmbedInput = str | list[int]


def _is_token_id(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_one(value: Any, where: str) -> EmbedInput:
    if isinstance(value, str):
        if not value:
            raise ValueError(f"{where}: an input must not be an empty string.")
        return value
    if isinstance(value, list):
        if not value:
            raise ValueError(f"{where}: a token-id input must not be empty.")
        if not all(_is_token_id(t) for t in value):
            raise ValueError(f"{where}: a token-id input must hold ints only.")
        return list(value)
    raise ValueError(
        f"{where}: expected a string or a list of token ids, got {type(value).__name__}."
    )


def parse_embedding_inputs(inputs: Any, field: str = "input") -> list[EmbedInput]:
    """The inputs as a list, one entry per embedding to compute."""
    if isinstance(inputs, str):
        return [_check_one(inputs, field)]
    if not isinstance(inputs, (list, tuple)):
        raise ValueError(
            f"{field} must be a string, a list of token ids, or a list of strings or token-id "
            f"lists; got {type(inputs).__name__}."
        )
    if not inputs:
        raise ValueError(f"{field} must not be empty.")
    if all(_is_token_id(t) for t in inputs):  # one input given as token ids
        return [list(inputs)]
    if len(inputs) > MAX_EMBEDDING_INPUTS:
        raise ValueError(
            f"{field}: at most {MAX_EMBEDDING_INPUTS} inputs per call, got {len(inputs)}."
        )
    return [_check_one(item, f"{field}[{i}]") for i, item in enumerate(inputs)]
