"""`hybridllm bench throughput|serve|frontend-overhead|batching|embed|engine-step|soak|beam|
structured|spec|race`."""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("bench", help="Benchmarks.")
    kinds = parser.add_subparsers(dest="bench", required=True)
    from hybridllm.bench import (
        batching,
        beam,
        embed,
        engine_step,
        frontend_overhead,
        linears,
        race,
        serve,
        soak,
        spec,
        structured,
        throughput,
    )

    throughput.add_parser(kinds)
    serve.add_parser(kinds)
    frontend_overhead.add_parser(kinds)
    batching.add_parser(kinds)
    embed.add_parser(kinds)
    engine_step.add_parser(kinds)
    soak.add_parser(kinds)
    beam.add_parser(kinds)
    structured.add_parser(kinds)
    spec.add_parser(kinds)
    linears.add_parser(kinds)
    race.add_parser(kinds)
