"""`hybridllm` command line: serve, worker, bench, convert, chat, complete (argparse
subcommands)."""

from __future__ import annotations

import argparse
import logging
import sys

from hybridllm.cli import bench as bench_cmd
from hybridllm.cli import chat as chat_cmd
from hybridllm.cli import serve as serve_cmd
from hybridllm.cli import worker as worker_cmd


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hybridllm", description="OpenAI-compatible LLM inference server."
    )
    parser.add_argument("--version", action="version", version=_version())
    sub = parser.add_subparsers(dest="command", required=True)
    serve_cmd.add_parser(sub)
    worker_cmd.add_parser(sub)
    bench_cmd.add_parser(sub)
    chat_cmd.add_parsers(sub)
    convert = sub.add_parser("convert", help="Convert the bundled GGUF model to a HF folder.")
    convert.add_argument("model", nargs="?", default=None)
    convert.set_defaults(func=_convert)
    return parser


def _version() -> str:
    from hybridllm import __version__

    return f"hybridllm {__version__}"


def _convert(args: argparse.Namespace) -> int:
    from hybridllm.models.resolve import resolve_model

    print(resolve_model(args.model))
    return 0


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    args = build_parser().parse_args(argv)
    args.raw_argv = list(sys.argv[1:] if argv is None else argv)  # what a supervisor re-runs
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
