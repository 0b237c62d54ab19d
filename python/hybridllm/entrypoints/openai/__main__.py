"""`python -m hybridllm.entrypoints.openai [MODEL] [flags]`: the Python frontend on its own
(what `hybridllm serve` runs without the Rust frontend; handy for tests)."""

from __future__ import annotations

import argparse
import logging
import sys

from hybridllm.config import EngineArgs
from hybridllm.entrypoints.openai.api_server import run_python_server
from hybridllm.entrypoints.rust_frontend import add_frontend_args


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hybridllm.entrypoints.openai")
    parser.add_argument("model_tag", nargs="?", default=None)
    EngineArgs.add_cli_args(parser)
    add_frontend_args(parser)
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return run_python_server(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
