"""`hybridllm worker`: the engine behind the gRPC contract."""

from __future__ import annotations

import argparse
import asyncio

from hybridllm.config import EngineArgs

DEFAULT_ENGINE_ADDRESS = "unix:///tmp/hybridllm-engine.sock"


def add_worker_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--engine-address", default=DEFAULT_ENGINE_ADDRESS,
                        help="unix:///path.sock (default) or host:port to serve gRPC on.")
    parser.add_argument("--shutdown-timeout", type=float, default=10.0,
                        help="Seconds in-flight requests may take to finish after SIGTERM.")


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("worker", help="Run the engine worker (gRPC, token ids only).")
    parser.add_argument("model_tag", nargs="?", default=None, help="Model (same as --model).")
    EngineArgs.add_cli_args(parser)
    add_worker_args(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from hybridllm.engine.async_llm_engine import AsyncLLMEngine
    from hybridllm.entrypoints.rust_frontend import exit_with_launcher
    from hybridllm.server.grpc_server import serve

    exit_with_launcher()
    args.model = args.model or args.model_tag
    engine_args = EngineArgs.from_cli_args(args)

    async def main() -> int:
        engine = AsyncLLMEngine.from_engine_args(engine_args)
        name = engine.engine.config.served_model_name
        return await serve(engine, args.engine_address, name, args.shutdown_timeout)

    return asyncio.run(main())
