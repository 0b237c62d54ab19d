"""Request-body parsing that fails like the Rust frontend (openai/mod.rs JsonBody): the body
is first parsed as a JSON value (syntax errors carry serde_json's message and position), then
typed; a type error names its field path (serde_path_to_error) in the message and `param`.
Fields of `#[serde(flatten)]` groups are reported after the directly declared ones."""

from __future__ import annotations

from typing import Any

from hybridllm.entrypoints.openai.json_scanner import Scanner, SyntaxErr, to_py
from hybridllm.entrypoints.openai.jsonfmt import rust_display

# Field types: "str", "bool", "i64", "u32", "f64", "any", ("seq", T), ("map", T),
# "struct:StreamOptions". A schema: (name | "*flatten", type | sub-schema, required).
Schema = list[tuple[str, Any, bool]]
_EXPECTED = {"str": "a string", "bool": "a boolean", "i64": "i64", "u32": "u32", "f64": "f64"}


class TypeErr(Exception):
    def __init__(self, msg: str, path: list[str]) -> None:
        super().__init__(msg)
        self.msg, self.path = msg, path


def path_str(segments: list[str]) -> str:
    out = ""
    for i, seg in enumerate(segments):
        out += seg if (i == 0 or seg.startswith("[")) else "." + seg
    return out or "."


def debug_str(s: str) -> str:
    """Rust's `{:?}` of a string."""
    esc = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\0": "\\0"}
    out = [esc.get(ch) or (f"\\u{{{ord(ch):x}}}" if ord(ch) < 0x20 or ord(ch) == 0x7F else ch)
           for ch in s]
    return '"' + "".join(out) + '"'


def unexpected(v: Any) -> str:
    if isinstance(v, str):
        return "string " + debug_str(v)
    if isinstance(v, bool):
        return f"boolean `{'true' if v else 'false'}`"
    if isinstance(v, int):
        return f"integer `{v}`"
    if isinstance(v, float):
        s = rust_display(v)
        return f"floating point `{s if '.' in s else s + '.0'}`"
    if v is None:
        return "null"
    return "sequence" if isinstance(v, list) else "map"


def check(v: Any, t: Any, path: list[str]) -> Any:
    if t == "any":
        return v
    if isinstance(t, tuple):
        kind, inner = t
        if kind == "seq":
            if not isinstance(v, list):
                raise TypeErr(f"invalid type: {unexpected(v)}, expected a sequence", path)
            return [check(x, inner, [*path, f"[{i}]"]) for i, x in enumerate(v)]
        if not isinstance(v, dict):
            raise TypeErr(f"invalid type: {unexpected(v)}, expected a map", path)
        return {k: check(x, inner, [*path, k]) for k, x in v.items()}
    if t == "struct:StreamOptions":
        if isinstance(v, list):  # serde structs also accept the sequence form
            if len(v) > 1:
                raise TypeErr(f"invalid length {len(v)}, expected fewer elements in array", path)
            return {"include_usage": check(v[0], "bool", [*path, "[0]"]) if v else False}
        if not isinstance(v, dict):
            raise TypeErr(f"invalid type: {unexpected(v)}, expected struct StreamOptions", path)
        iu = v.get("include_usage", False)
        return {"include_usage": check(iu, "bool", [*path, "include_usage"])}
    ok = {"str": str, "bool": bool, "f64": (int, float), "i64": int, "u32": int}[t]
    if not isinstance(v, ok) or (t != "bool" and isinstance(v, bool)):
        raise TypeErr(f"invalid type: {unexpected(v)}, expected {_EXPECTED[t]}", path)
    if t == "i64" and v >= 1 << 63 or t == "u32" and not 0 <= v < 1 << 32:
        raise TypeErr(f"invalid value: integer `{v}`, expected {t}", path)
    return float(v) if t == "f64" else v


def _group(value: Any, group: Schema) -> dict[str, Any]:
    """One flattened group alone, as the Rust side re-parses it to find the field."""
    out: dict[str, Any] = {}
    if isinstance(value, list):  # a struct from a sequence: fields by position
        for (name, t, _), v in zip(group, value):
            if v is not None:
                out[name] = check(v, t, [f"[{len(out)}]"])
        return out
    if not isinstance(value, dict):
        return out
    types = {name: t for name, t, _ in group}
    for k, v in value.items():
        if k in types and v is not None:
            out[k] = check(v, types[k], [k])
    return out


def parse(body: bytes, schema: Schema, struct_name: str) -> dict[str, Any]:
    """{field: value} with absent or null Option fields omitted. Raises ValueError(message)
    for syntax errors and TypeErr (msg, path) for type errors."""
    sc = Scanner(body)
    try:
        value = to_py(sc.value(0))
        if sc.ws() is not None:
            raise sc.peek_err("trailing characters")
    except SyntaxErr as e:
        raise ValueError(f"Invalid JSON body: {e.msg} at {_pos(body, e.at)}") from None
    groups = [t for name, t, _ in schema if name == "*flatten"]
    direct = {name: (t, req) for name, t, req in schema if name != "*flatten"}
    if not isinstance(value, dict):
        main = TypeErr(f"invalid type: {unexpected(value)}, expected struct {struct_name}", [])
    else:
        out: dict[str, Any] = {}
        for k, v in value.items():
            if k in direct and not (v is None and not direct[k][1]):
                out[k] = check(v, direct[k][0], [k])
        missing = [n for n, (_, req) in direct.items() if req and n not in out]
        if not missing:
            for g in groups:
                out.update(_group(value, g))
            return out
        main = TypeErr(f"missing field `{missing[0]}`", [])
    for g in groups:  # the field of a flattened error is only found by parsing groups alone
        try:
            _group(value, g)
        except TypeErr as e:
            raise e from None
    raise main


def _pos(body: bytes, at: int) -> str:
    line = body.count(b"\n", 0, at) + 1
    col = at - (body.rfind(b"\n", 0, at) + 1)
    return f"line {line} column {col}"
