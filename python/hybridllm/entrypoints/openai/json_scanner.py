"""A JSON reader that keeps byte positions and fails with serde_json's syntax messages and
positions (`at`: the bytes consumed when serde_json reports the error)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

MAX_DEPTH = 128


class SyntaxErr(Exception):
    def __init__(self, msg: str, at: int) -> None:
        super().__init__(msg)
        self.msg, self.at = msg, at  # `at`: bytes consumed when serde reported it


@dataclass
class Node:
    kind: str  # "obj", "arr", "str", "u", "i", "f", "bool", "null"
    value: Any
    start: int
    end: int
    items: list[Any] = field(default_factory=list)  # obj: (key, key_end, Node); arr: Node


class Scanner:
    def __init__(self, b: bytes) -> None:
        self.b, self.i = b, 0
        self.top: list[tuple[str, int, Node]] = []  # completed top-level entries so far

    def ws(self) -> int | None:
        b = self.b
        while self.i < len(b) and b[self.i] in b" \t\n\r":
            self.i += 1
        return b[self.i] if self.i < len(b) else None

    def peek_err(self, msg: str) -> SyntaxErr:
        return SyntaxErr(msg, self.i + 1)

    def value(self, depth: int) -> Node:
        c = self.ws()
        start = self.i
        if c is None:
            raise SyntaxErr("EOF while parsing a value", self.i)
        if c == ord("{") or c == ord("["):
            if depth >= MAX_DEPTH:
                raise SyntaxErr("recursion limit exceeded", self.i + 1)
            return self.obj(depth) if c == ord("{") else self.arr(depth)
        if c == ord('"'):
            s = self.string()
            return Node("str", s, start, self.i)
        for word, kind, val in ((b"true", "bool", True), (b"false", "bool", False),
                                (b"null", "null", None)):
            if c == word[0]:
                for expected in word:
                    if self.i >= len(self.b):
                        raise SyntaxErr("EOF while parsing a value", self.i)
                    self.i += 1
                    if self.b[self.i - 1] != expected:
                        raise SyntaxErr("expected ident", self.i)
                return Node(kind, val, start, self.i)
        if c == ord("-") or ord("0") <= c <= ord("9"):
            return self.number(start)
        raise self.peek_err("expected value")

    def number(self, start: int) -> Node:
        b, i = self.b, self.i
        if b[i] == ord("-"):
            i += 1
        digits = i
        while i < len(b) and 48 <= b[i] <= 57:
            i += 1
        if i == digits:
            self.i = i
            raise SyntaxErr("EOF while parsing a value" if i >= len(b) else "invalid number", i + 1)
        if b[digits] == 48 and i - digits > 1:
            raise SyntaxErr("invalid number", digits + 2)
        is_float = False
        for marker in (b".", b"eE"):
            if i < len(b) and b[i] in marker:
                is_float = True
                i += 1
                if marker == b"eE" and i < len(b) and b[i] in b"+-":
                    i += 1
                d = i
                while i < len(b) and 48 <= b[i] <= 57:
                    i += 1
                if i == d:
                    if i >= len(b):
                        raise SyntaxErr("EOF while parsing a value", i)
                    raise SyntaxErr("invalid number", i + 1)
        self.i = i
        text = b[start:i].decode()
        if not is_float:
            n = int(text)
            if 0 <= n < 1 << 64:
                return Node("u", n, start, i)
            if -(1 << 63) <= n < 0:
                return Node("i", n, start, i)
        x = float(text)
        if x in (float("inf"), float("-inf")):
            raise SyntaxErr("number out of range", i)
        return Node("f", x, start, i)

    def string(self) -> str:
        b = self.b
        i = self.i + 1
        while True:
            if i >= len(b):
                self.i = i
                raise SyntaxErr("EOF while parsing a string", i)
            c = b[i]
            if c == ord('"'):
                break
            if c < 0x20:
                raise SyntaxErr("control character (\\u0000-\\u001F) found while parsing a string",
                                i + 1)
            if c == ord("\\"):
                i += 1
                if i < len(b) and b[i] not in b'"\\/bfnrtu':
                    raise SyntaxErr("invalid escape", i + 1)
            i += 1
        raw = b[self.i : i + 1]
        self.i = i + 1
        try:
            return json.loads(raw)
        except (ValueError, UnicodeDecodeError) as e:
            raise SyntaxErr("invalid escape", self.i) from e

    def arr(self, depth: int) -> Node:
        node = Node("arr", None, self.i, 0)
        self.i += 1
        if self.ws() == ord("]"):
            self.i += 1
            node.end = self.i
            return node
        while True:
            node.items.append(self.value(depth + 1))
            c = self.ws()
            if c is None:
                raise SyntaxErr("EOF while parsing a list", self.i)
            if c == ord("]"):
                self.i += 1
                node.end = self.i
                return node
            if c != ord(","):
                raise self.peek_err("expected `,` or `]`")
            self.i += 1
            if self.ws() == ord("]"):
                raise self.peek_err("trailing comma")

    def obj(self, depth: int) -> Node:
        node = Node("obj", None, self.i, 0)
        self.i += 1
        c = self.ws()
        if c == ord("}"):
            node.close = self.i  # type: ignore[attr-defined]
            self.i += 1
            node.end = self.i
            return node
        while True:
            if c is None:
                raise SyntaxErr("EOF while parsing an object" if not node.items
                                else "EOF while parsing a value", self.i)
            if c == ord("}"):
                raise self.peek_err("trailing comma")
            if c != ord('"'):
                raise self.peek_err("key must be a string")
            key = self.string()
            key_end = self.i
            c = self.ws()
            if c is None:
                raise SyntaxErr("EOF while parsing an object", self.i)
            if c != ord(":"):
                raise self.peek_err("expected `:`")
            self.i += 1
            val = self.value(depth + 1)
            node.items.append((key, key_end, val))
            if depth == 0:
                self.top.append((key, key_end, val))
            c = self.ws()
            if c is None:
                raise SyntaxErr("EOF while parsing an object", self.i)
            if c == ord("}"):
                node.close = self.i  # type: ignore[attr-defined]
                self.i += 1
                node.end = self.i
                return node
            if c != ord(","):
                raise self.peek_err("expected `,` or `}`")
            self.i += 1
            c = self.ws()


def to_py(n: Node) -> Any:
    if n.kind == "obj":
        out: dict[str, Any] = {}
        for k, _, v in n.items:
            out[k] = to_py(v)  # a repeated key keeps its first place, with the last value
        return out
    if n.kind == "arr":
        return [to_py(x) for x in n.items]
    return n.value
