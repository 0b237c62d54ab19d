"""Lines of Python that only the fallback (FastAPI) frontend uses.

A module counts when the fallback frontend's entry points import it, directly or through
others, and none of the other ways into the package does (the worker, the offline `LLM`, the
Rust-frontend launcher, the CLI's other commands, the benchmarks). Lines are physical lines,
as `wc -l` counts them. Exits 1 when the total is over --max.

    python ci/count_fallback_lines.py [--max N]
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

import grimp

FALLBACK_ROOTS = ["hybridllm.entrypoints.openai"]
# Everything else that starts code of the package (keep in step with cli/ and bench/).
OTHER_ROOTS = [
    "hybridllm.entrypoints.llm",
    "hybridllm.entrypoints.rust_frontend",
    "hybridllm.server",
    "hybridllm.cli.worker",
    "hybridllm.bench",
]


def closure(graph: grimp.ImportGraph, roots: list[str]) -> set[str]:
    out: set[str] = set()
    for root in roots:
        members = {root} | graph.find_descendants(root) if root in graph.modules else set()
        for m in members:
            out |= {m} | graph.find_upstream_modules(m)
    return out


def module_file(name: str) -> Path | None:
    spec = importlib.util.find_spec(name)
    return Path(spec.origin) if spec is not None and spec.origin else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--max", type=int, default=None, help="fail when the total is over this")
    args = ap.parse_args()
    graph = grimp.build_graph("hybridllm", cache_dir=None)
    only = sorted(closure(graph, FALLBACK_ROOTS) - closure(graph, OTHER_ROOTS))
    total = 0
    for name in only:
        path = module_file(name)
        if path is None or path.suffix != ".py":
            continue
        n = len(path.read_text().splitlines())
        total += n
        print(f"{n:6d}  {name}")
    print(f"{total:6d}  total (fallback-only Python lines)")
    if args.max is not None and total > args.max:
        print(f"over the limit of {args.max} lines", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
