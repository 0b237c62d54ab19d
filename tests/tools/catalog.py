"""A hundred function tools of varied shape, made deterministically: flat and nested
objects, enums, arrays, numbers with bounds, optional fields, tools without parameters."""

from __future__ import annotations

from typing import Any

VERBS = ["get", "set", "find", "list", "create", "delete", "update", "send", "book", "convert"]
NOUNS = ["weather", "user", "order", "flight", "invoice", "song", "ticket", "note", "file",
         "meeting"]

# Property shapes, picked in turn.
SHAPES: list[tuple[str, dict[str, Any]]] = [
    ("city", {"type": "string", "description": "A city name", "maxLength": 24}),
    ("unit", {"type": "string", "enum": ["celsius", "fahrenheit"]}),
    ("count", {"type": "integer", "minimum": 1, "maximum": 20}),
    ("price", {"type": "number", "minimum": 0}),
    ("urgent", {"type": "boolean"}),
    ("tags", {"type": "array", "items": {"type": "string", "enum": ["red", "green", "blue"]},
              "maxItems": 3}),
    ("ids", {"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 4}),
    ("address", {"type": "object", "properties": {
        "street": {"type": "string", "maxLength": 30},
        "zip": {"type": "string", "pattern": "^[0-9]{5}$"}}, "required": ["zip"]}),
    ("when", {"type": "string", "enum": ["today", "tomorrow", "next week"]}),
    ("owner", {"type": "object", "properties": {
        "name": {"type": "string", "maxLength": 20},
        "role": {"type": "string", "enum": ["admin", "guest"]},
        "age": {"type": "integer", "minimum": 0, "maximum": 120}},
        "required": ["name", "role"]}),
    # (Not `"type": ["string", "null"]`: the Hermes template recurses on a type list until
    # Jinja's recursion limit, in Jinja2 as here.)
    ("note", {"anyOf": [{"type": "string", "maxLength": 40}, {"type": "null"}]}),
    ("level", {"type": "integer", "enum": [1, 2, 3]}),
]


def tool(i: int) -> dict[str, Any]:
    """Tool number `i`: 0 to 4 properties, some of them optional."""
    name = f"{VERBS[i % 10]}_{NOUNS[(i // 10) % 10]}_{i}"
    n_props = i % 5
    props = {}
    for k in range(n_props):
        key, schema = SHAPES[(i + 3 * k) % len(SHAPES)]
        props[key if key not in props else f"{key}_{k}"] = schema
    required = [k for j, k in enumerate(props) if (i + j) % 3 != 0]
    function: dict[str, Any] = {"name": name, "description": f"{name.replace('_', ' ')}."}
    if n_props or i % 2:
        function["parameters"] = {"type": "object", "properties": props, "required": required}
    return {"type": "function", "function": function}


TOOLS = [tool(i) for i in range(100)]


def parameters(t: dict[str, Any]) -> dict[str, Any]:
    """The schema a tool's arguments must satisfy (none given: an empty object)."""
    return t["function"].get("parameters") or {"type": "object", "properties": {}}
