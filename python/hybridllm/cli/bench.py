"""`hybridllm bench throughput|serve`."""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("bench", help="Benchmarks.")
    kinds = parser.add_subparsers(dest="bench", required=True)
    from hybridllm.bench import throughput

    throughput.add_parser(kinds)
