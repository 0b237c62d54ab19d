"""The route tables the two routers are built from: the Rust frontend's own list
(`hybridllm-frontend routes`, printed from routes.rs) and the FastAPI app's routes."""

from __future__ import annotations

import json
import subprocess

from hybridllm.entrypoints.rust_frontend import find_frontend_binary


def rust_routes() -> set[tuple[str, str]]:
    """The table the Rust router is built from (`hybridllm-frontend routes`)."""
    out = subprocess.run([str(find_frontend_binary()), "routes"], check=True,
                         capture_output=True, text=True).stdout
    rows = [json.loads(line) for line in out.splitlines()]
    assert rows, "the Rust frontend printed no routes"
    return {(r["method"], r["path"]) for r in rows}


def python_routes() -> set[tuple[str, str]]:
    """The FastAPI app's own routes, through included routers."""
    from fastapi.routing import APIRoute

    from hybridllm.entrypoints.openai.api_server import build_app
    from hybridllm.server.engine_client import GrpcEngineClient

    def walk(routes: list) -> set[tuple[str, str]]:
        found: set[tuple[str, str]] = set()
        for r in routes:
            inner = getattr(r, "original_router", None)  # FastAPI >= 0.16x wraps routers
            if inner is not None:
                found |= walk(inner.routes)
            elif isinstance(r, APIRoute):
                found |= {(m, r.path) for m in r.methods}
        return found

    return walk(build_app(GrpcEngineClient("unix:///nonexistent")).routes)


def routes(kind: str) -> set[tuple[str, str]]:
    return rust_routes() if kind == "rust" else python_routes()
