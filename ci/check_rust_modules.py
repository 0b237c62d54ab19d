#!/usr/bin/env python3
"""Fails when modules of the Rust frontend depend on each other in a cycle.

A module is a source file (`foo/mod.rs` is module `foo`), found by following `mod x;` from
each crate root (src/main.rs, src/lib.rs, src/bin/*.rs); `#[cfg(test)]` modules and items
are left out, and an inline `mod x { ... }` counts as part of its file. Module A depends on
module B when A's code names a path into B: `crate::b::...`, `super::...`, `self::...`, or a
path starting with one of A's child modules or with a module A imported (`use crate::b;`),
in `use` trees and anywhere else. A path counts as a dependency on the deepest module it
names (`crate::openai::chat::handle` is `openai::chat`). Comments and strings are ignored.

Usage: check_rust_modules.py [--edges] [CRATE_DIR]   (default: rust-frontend next to ci/)
  --edges  also print every dependency and where it is named
Exit status: 0 no cycle, 1 a cycle (printed with where each dependency is named), 2 the
checker's own self-test failed.
"""

import re
import sys
from pathlib import Path
from pathlib import PurePosixPath as P

# Comments, strings and char literals, in one left-to-right scan (so "//" in a string is a
# string and a quote in a comment is a comment).
NOISE = re.compile(
    r"""//[^\n]*|/\*.*?\*/|b?r(\#*)".*?"\1|b?"(?:\\.|[^"\\])*"|b?'(?:\\.|[^'\\\n])'""",
    re.S,
)
CFG_TEST = re.compile(r"#\s*\[\s*cfg\s*\(\s*test\s*\)\s*\]")
MOD_DECL = re.compile(r"\bmod\s+(\w+)\s*;")
USE_DECL = re.compile(r"\buse\s+([^;]+);")
PATH = re.compile(r"(?<![\w:$])\w+(?:\s*::\s*\w+)+")


def blank(text):
    """Same length and line breaks, no content: line numbers stay right."""
    return re.sub(r"[^\n]", " ", text)


def strip_noise(src):
    return NOISE.sub(lambda m: blank(m.group(0)), src)


def strip_test_items(src):
    """Blanks every item marked #[cfg(test)]: up to its `;` or through its `{...}` block."""
    out = src
    for m in reversed(list(CFG_TEST.finditer(src))):
        i, depth = m.end(), 0
        while i < len(src):
            c = src[i]
            if c == "#" and depth == 0 and src[i + 1 : i + 2] == "[":  # a further attribute
                i = src.index("]", i)
            elif c == ";" and depth == 0:
                break
            elif c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
                if depth == 0:
                    break
            i += 1
        out = out[: m.start()] + blank(out[m.start() : i + 1]) + out[i + 1 :]
    return out


def use_paths(tree):
    """`a::{b, c::{d as e, self}}` -> [(['a','b'], 'b'), (['a','c','d'], 'e'), (['a','c'], 'c')]:
    each path with the name it brings into scope."""
    tokens = re.findall(r"\w+|::|[{},*]", tree)
    pos = 0

    def parse(prefix):
        nonlocal pos
        segs, out = list(prefix), []
        while pos < len(tokens) and tokens[pos] not in (",", "}"):
            t = tokens[pos]
            pos += 1
            if t == "{":
                while pos < len(tokens) and tokens[pos] != "}":
                    out += parse(segs)
                    if pos < len(tokens) and tokens[pos] == ",":
                        pos += 1
                pos += 1
                return out
            if t == "as":
                alias = tokens[pos]
                pos += 1
                return out + [(segs, alias)]
            if t == "self" and segs:
                return out + [(segs, segs[-1])]
            if t != "::":
                segs.append(t)
        return out + ([(segs, segs[-1])] if segs else [])

    return parse([])


class Crate:
    def __init__(self, files, root):
        self.files = files  # path -> source text
        self.modules = {}  # module path (tuple of names) -> (file, cleaned text)
        self.children = {}  # module path -> names of its file modules
        self._load((), root)

    def _load(self, mod, file):
        text = strip_test_items(strip_noise(self.files[file]))
        self.modules[mod] = (file, text)
        f = P(file)
        folder = f.parent if (mod == () or f.name == "mod.rs") else f.parent / f.stem
        self.children[mod] = []
        for name in MOD_DECL.findall(text):
            cands = [str(c) for c in (folder / f"{name}.rs", folder / name / "mod.rs")]
            found = [c for c in cands if c in self.files]
            if not found:  # e.g. a #[path] attribute, which this checker does not follow
                raise SystemExit(f"check_rust_modules: no file for `mod {name};` in {file}")
            self.children[mod].append(name)
            self._load(mod + (name,), found[0])

    def resolve(self, mod, segs, names):
        """(the deepest module a path names, whether the path is that module itself), or
        None if the path starts outside the crate."""
        first, rest = segs[0], segs[1:]
        if first == "crate":
            cur = ()
        elif first == "self":
            cur = mod
        elif first == "super":
            cur = mod[:-1]
            while rest and rest[0] == "super":
                cur, rest = cur[:-1], rest[1:]
        elif first in names:
            cur = names[first]
        else:
            return None
        depth = 0
        while depth < len(rest) and cur + (rest[depth],) in self.modules:
            cur += (rest[depth],)
            depth += 1
        return cur, depth == len(rest)

    def edges(self):
        """{(from, to): (file, line, path text)} for every dependency between two modules."""
        found = {}
        for mod, (file, text) in self.modules.items():
            names = {c: mod + (c,) for c in self.children[mod]}
            refs = []  # (offset, segments, text)
            for m in USE_DECL.finditer(text):
                for segs, alias in use_paths(m.group(1)):
                    resolved = self.resolve(mod, segs, names)
                    if resolved and resolved[1]:
                        names[alias] = resolved[0]  # `use crate::openai;`, then `openai::chat`
                    refs.append((m.start(), segs, m.group(0)))
            code = USE_DECL.sub(lambda m: blank(m.group(0)), text)
            for m in PATH.finditer(code):
                refs.append((m.start(), re.split(r"\s*::\s*", m.group(0)), m.group(0)))
            for offset, segs, shown in refs:
                target = (self.resolve(mod, segs, names) or (None,))[0]
                if target is not None and target != mod and (mod, target) not in found:
                    line = text.count("\n", 0, offset) + 1
                    found[(mod, target)] = (file, line, " ".join(shown.split()))
        return found


def find_cycle(nodes, edges):
    """One cycle as a list of modules (first repeated last), or None."""
    succ = {n: sorted(t for (f, t) in edges if f == n) for n in nodes}
    state = {}  # 1: on the current path, 2: done

    def visit(n, path):
        state[n] = 1
        path.append(n)
        for m in succ[n]:
            if state.get(m) == 1:
                return path[path.index(m) :] + [m]
            if m not in state:
                cycle = visit(m, path)
                if cycle:
                    return cycle
        path.pop()
        state[n] = 2
        return None

    for n in sorted(nodes):
        if n not in state:
            cycle = visit(n, [])
            if cycle:
                return cycle
    return None


def name(mod):
    return "::".join(("crate",) + mod)


def check(files, root):
    """(cycle or None, number of modules, number of dependencies, the edges)."""
    crate = Crate(files, root)
    edges = crate.edges()
    return find_cycle(crate.modules, edges), len(crate.modules), len(edges), edges


def self_test():
    """The checker must find a cycle through code, and none through tests, comments or
    strings."""
    base = {
        "src/main.rs": "mod a;\nmod b;\nfn main() { a::f(); }\n",
        "src/b/mod.rs": "pub mod c;\npub fn g() {}\n",
        "src/b/c.rs": "pub fn h() {}\n",
    }
    a_uses_c = 'use crate::b::{self, c::h};\n// super::a::f\nconst S: &str = "crate::a";\n'
    c_test_only = "pub fn h() {}\n#[cfg(test)]\nmod tests { use crate::a::f; }\n"
    ok = {**base, "src/a.rs": a_uses_c + "pub fn f() { b::g(); }\n", "src/b/c.rs": c_test_only}
    bad = {**ok, "src/b/c.rs": "pub fn h() { crate::a::f() }\n"}
    cycle, _, _, edges = check(ok, "src/main.rs")
    assert cycle is None, cycle
    assert set(edges) == {((), ("a",)), (("a",), ("b",)), (("a",), ("b", "c"))}, edges
    cycle, _, _, _ = check(bad, "src/main.rs")
    assert cycle == [("a",), ("b", "c"), ("a",)], cycle


def main():
    try:
        self_test()
    except AssertionError as e:
        print(f"check_rust_modules: self-test failed: {e!r}", file=sys.stderr)
        return 2
    args = sys.argv[1:]
    show_edges = "--edges" in args
    args = [a for a in args if a != "--edges"]
    crate_dir = P(args[0]) if args else P(__file__).parent.parent / "rust-frontend"

    files = {
        str(P(p.relative_to(crate_dir))): p.read_text() for p in Path(crate_dir).glob("src/**/*.rs")
    }
    is_root = re.compile(r"src/(main|lib|bin/[^/]+)\.rs").fullmatch
    roots = sorted(f for f in files if is_root(f))
    status = 0
    for root in roots:
        cycle, n_mods, n_edges, edges = check(files, root)
        if show_edges:
            for (a, b), (file, line, shown) in sorted(edges.items()):
                print(f"{name(a)} -> {name(b)}: {file}:{line}: {shown}")
        if cycle:
            print(f"{crate_dir}/{root}: module cycle: " + " -> ".join(map(name, cycle)))
            for a, b in zip(cycle, cycle[1:]):
                file, line, shown = edges[(a, b)]
                print(f"  {name(a)} -> {name(b)}: {crate_dir}/{file}:{line}: {shown}")
            status = 1
        else:
            print(f"{crate_dir}/{root}: {n_mods} modules, {n_edges} dependencies, no cycle")
    return status


if __name__ == "__main__":
    sys.exit(main())
