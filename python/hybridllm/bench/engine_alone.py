"""The mock engine by itself under the same closed loop: AsyncLLMEngine driven in-process
(outputs through a RequestTracker), no HTTP, gRPC or tokenizer in the way. Its TTFT at a level
is what the engine alone costs a request there (waiting for the step in flight, its own
prefill step, queueing for the token budget), so a frontend's TTFT minus it is what that
frontend adds."""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import TYPE_CHECKING

from hybridllm.bench.metrics import percentile
from hybridllm.config import EngineArgs
from hybridllm.sampling_params import SamplingParams

if TYPE_CHECKING:  # the engine (torch) is imported only when measuring
    from hybridllm.engine.request_tracker import RequestTracker


async def _closed_loop(tracker: RequestTracker, conc: int, num_requests: int, prompt_len: int,
                       output_len: int) -> dict:
    ttfts: list[float] = []
    next_id = iter(range(num_requests))
    params = SamplingParams(temperature=0.0, max_tokens=output_len, ignore_eos=True)

    async def stream() -> None:
        for i in next_id:
            # Distinct prompts, as the benchmark's random ones are: no prefix-cache hits.
            ids = [1000 + (i * 131 + j) % 30000 for j in range(prompt_len)]
            start = time.perf_counter()
            first = 0.0
            async for out in tracker.generate(ids, params, f"alone-{conc}-{i}"):
                if not first and out.outputs[0].token_ids:
                    first = time.perf_counter() - start
            ttfts.append(first)

    t0 = time.perf_counter()
    await asyncio.gather(*(stream() for _ in range(conc)))
    duration = time.perf_counter() - t0
    return {"req_s": num_requests / duration,
            "ttft_p50_ms": 1000.0 * percentile(ttfts, 50),
            "ttft_p99_ms": 1000.0 * percentile(ttfts, 99)}


def measure(step_ms: float, engine_flags: list[str], levels: dict[int, int], prompt_len: int,
            output_len: int) -> dict[int, dict]:
    """levels: concurrency -> number of requests. One engine for all levels."""
    from hybridllm.engine.async_llm_engine import AsyncLLMEngine
    from hybridllm.engine.request_tracker import RequestTracker

    parser = EngineArgs.add_cli_args(argparse.ArgumentParser())
    args = EngineArgs.from_cli_args(parser.parse_args(
        ["--mock-engine", "--mock-step-ms", str(step_ms), *engine_flags]))

    async def main() -> dict[int, dict]:
        engine = AsyncLLMEngine.from_engine_args(args)
        tracker = RequestTracker(engine)
        try:
            return {conc: await _closed_loop(tracker, conc, n, prompt_len, output_len)
                    for conc, n in levels.items()}
        finally:
            await engine.shutdown()

    return asyncio.run(main())
