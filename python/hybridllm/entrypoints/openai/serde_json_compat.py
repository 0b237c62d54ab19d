"""Request-body parsing that fails like the Rust frontend's serde_json + serde derive: the
same messages ("invalid type: string \"x\", expected f64 at line 1 column 63") and positions.

serde reports a syntax error, or a type error of a directly declared field, where it reads it;
fields of `#[serde(flatten)]` structs are only checked once the whole object has been read.
"""

from __future__ import annotations

from typing import Any

from hybridllm.entrypoints.openai.json_scanner import Node, Scanner, SyntaxErr
from hybridllm.entrypoints.openai.jsonfmt import rust_display


class TypeErr(Exception):
    def __init__(self, msg: str, at: int) -> None:
        super().__init__(msg)
        self.msg, self.at = msg, at


# Field types: "str", "bool", "i64", "u32", "f64", "any", ("seq", T), ("map", T), "struct:Name".
Schema = list[tuple[str, Any, bool]]  # (name | "*flatten", type | sub-schema, required)

_EXPECTED = {"str": "a string", "bool": "a boolean", "i64": "i64", "u32": "u32", "f64": "f64"}


def _debug_str(s: str) -> str:
    out = []
    for ch in s:
        o = ord(ch)
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\t":
            out.append("\\t")
        elif ch == "\0":
            out.append("\\0")
        elif o < 0x20 or o == 0x7F:
            out.append(f"\\u{{{o:x}}}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def unexpected(n: Node) -> str:
    if n.kind == "str":
        return "string " + _debug_str(n.value)
    if n.kind in ("u", "i"):
        return f"integer `{n.value}`"
    if n.kind == "f":
        s = rust_display(n.value)
        return f"floating point `{s if '.' in s else s + '.0'}`"
    if n.kind == "bool":
        return f"boolean `{'true' if n.value else 'false'}`"
    return {"null": "null", "arr": "sequence", "obj": "map"}[n.kind]


def _type_err(n: Node, expected: str) -> TypeErr:
    # serde_json reads a scalar before complaining, but not a list or map.
    at = n.start if n.kind in ("arr", "obj") else n.end
    return TypeErr(f"invalid type: {unexpected(n)}, expected {expected}", at)


def convert(n: Node, t: Any, flat_at: int | None = None) -> Any:
    """Checks node n against type t; flat_at: the position to report (flattened fields)."""
    try:
        return _convert(n, t)
    except TypeErr as e:
        if flat_at is not None:
            e.at = flat_at
        raise


def _convert(n: Node, t: Any) -> Any:
    if t == "any":
        return to_py(n)
    if isinstance(t, tuple):
        kind, inner = t
        want = "arr" if kind == "seq" else "obj"
        if n.kind != want:
            raise _type_err(n, "a sequence" if kind == "seq" else "a map")
        if kind == "seq":
            return [_convert(x, inner) for x in n.items]
        return {k: _convert(v, inner) for k, _, v in n.items}
    if t == "struct:StreamOptions":
        if n.kind != "obj":
            raise _type_err(n, "struct StreamOptions")
        opts = {"include_usage": False}
        for k, _, v in n.items:
            if k == "include_usage":
                opts[k] = _convert(v, "bool")
        return opts
    ok = {"str": ("str",), "bool": ("bool",), "f64": ("u", "i", "f"), "i64": ("u", "i"),
          "u32": ("u", "i")}[t]
    if n.kind not in ok:
        raise _type_err(n, _EXPECTED[t])
    if t == "i64" and n.value >= 1 << 63 or t == "u32" and not 0 <= n.value < 1 << 32:
        raise TypeErr(f"invalid value: integer `{n.value}`, expected {t}", n.end)
    return float(n.value) if t == "f64" else n.value


def to_py(n: Node) -> Any:
    if n.kind == "obj":
        return {k: to_py(v) for k, _, v in n.items}
    if n.kind == "arr":
        return [to_py(x) for x in n.items]
    return n.value


def parse_request(body: bytes, schema: Schema, struct_name: str) -> dict[str, Any]:
    """Returns {field: value} (absent Option fields omitted); raises ValueError(message)."""
    sc = Scanner(body)
    syntax: SyntaxErr | None = None
    root: Node | None = None
    try:
        root = sc.value(0)
        if sc.ws() is not None:
            raise sc.peek_err("trailing characters")
    except SyntaxErr as e:
        syntax = e
    first = body.lstrip(b" \t\n\r")[:1]
    try:
        if first == b"[":  # serde refuses a list for a struct before reading it
            raise TypeErr(f"invalid type: sequence, expected struct {struct_name}",
                          len(body) - len(body.lstrip(b" \t\n\r")))
        if first != b"{":
            if syntax is not None:
                raise syntax
            assert root is not None
            raise _type_err(root, f"struct {struct_name}")
        return _fill(sc.top, schema, syntax, getattr(root, "close", len(body) - 1))
    except SyntaxErr as e:
        raise ValueError(f"Invalid JSON body: {e.msg} at {_pos(body, e.at)}") from None
    except TypeErr as e:
        raise ValueError(f"Invalid request: {e.msg} at {_pos(body, e.at)}") from None


def _fill(entries: list[tuple[str, int, Node]], schema: Schema, syntax: SyntaxErr | None,
          close: int) -> dict[str, Any]:
    direct = {name: (t, req) for name, t, req in schema if name != "*flatten"}
    out: dict[str, Any] = {}
    flat_seen: dict[str, Node] = {}
    flat_dups: list[str] = []
    flat_names = {n for name, sub, _ in schema if name == "*flatten" for n, _, _ in sub}
    for key, key_end, node in entries:
        if key in direct:
            if key in out:
                raise TypeErr(f"duplicate field `{key}`", key_end)
            t, _ = direct[key]
            v = None if node.kind == "null" and not direct[key][1] else convert(node, t)
            out[key] = v
        elif key in flat_names:
            if key in flat_seen:
                flat_dups.append(key)
            flat_seen[key] = flat_seen.get(key, node)
    if syntax is not None:
        raise syntax
    at = close + 1  # serde peeks the closing brace when the map ends
    for name, t, req in schema:
        if name == "*flatten":
            for sub_name, sub_t, _ in t:
                if sub_name in flat_dups:
                    raise TypeErr(f"duplicate field `{sub_name}`", at)
                node = flat_seen.get(sub_name)
                if node is not None and node.kind != "null":
                    out[sub_name] = convert(node, sub_t, flat_at=at)
        elif req and name not in out:
            raise TypeErr(f"missing field `{name}`", at)
    required = {name for name, _, req in schema if req}
    return {k: v for k, v in out.items() if v is not None or k in required}


def _pos(body: bytes, at: int) -> str:
    line = body.count(b"\n", 0, at) + 1
    col = at - (body.rfind(b"\n", 0, at) + 1)
    return f"line {line} column {col}"
