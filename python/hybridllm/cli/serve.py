"""`hybridllm serve`: the OpenAI-compatible server (Rust frontend, or the Python fallback)."""

from __future__ import annotations

import argparse

from hybridllm.cli.worker import add_worker_args
from hybridllm.config import EngineArgs


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("serve", help="Serve the OpenAI-compatible API.")
    parser.add_argument("model_tag", nargs="?", default=None,
                        help="Model folder or bundled name (default: the bundled model).")
    EngineArgs.add_cli_args(parser)
    add_worker_args(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    raise SystemExit("hybridllm serve: not available yet")
