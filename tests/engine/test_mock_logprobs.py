"""The mock engine answers logprob requests in the real sampler's shapes (one entry per
generated token with the chosen token at rank 1 and `logprobs` entries, one per prompt token
after the first, a cumulative logprob), so that the serving layers over it (fuzzing, soak,
buffer limits) run the logprobs paths instead of failing in them."""

from __future__ import annotations

import argparse
from pathlib import Path

from hybridllm.config import EngineArgs
from hybridllm.engine.llm_engine import LLMEngine
from hybridllm.sampling_params import SamplingParams

PROMPT = [504, 3575, 282, 1117, 30]


def test_mock_engine_logprobs_have_the_real_shapes(model_path: Path) -> None:
    parser = EngineArgs.add_cli_args(argparse.ArgumentParser())
    args = EngineArgs.from_cli_args(parser.parse_args(
        ["--model", str(model_path), "--mock-engine", "--mock-step-ms", "0",
         "--max-num-batched-tokens", "2", "--enable-chunked-prefill"]))  # prompt in 3 chunks
    engine = LLMEngine.from_engine_args(args)
    engine.add_request("lp", PROMPT, SamplingParams(
        max_tokens=6, ignore_eos=True, logprobs=3, prompt_logprobs=2))
    engine.add_request("none", PROMPT, SamplingParams(max_tokens=6, ignore_eos=True))
    final = {}
    while engine.has_unfinished_requests():
        for out in engine.step():
            if out.finished:
                final[out.request_id] = out
    lp = final["lp"].outputs[0]
    assert len(lp.token_ids) == len(lp.logprobs) == 6
    for token, entry in zip(lp.token_ids, lp.logprobs):
        assert len(entry) == 3 and entry[token].rank == 1
        assert sorted(e.rank for e in entry.values()) == [1, 2, 3]
    assert lp.cumulative_logprob == -0.5 * 6
    prompt_lp = final["lp"].prompt_logprobs
    assert prompt_lp[0] is None and len(prompt_lp) == len(PROMPT)
    for token, entry in zip(PROMPT[1:], prompt_lp[1:]):
        assert len(entry) == 2 and entry[token].rank == 1
    assert final["none"].outputs[0].logprobs is None
    assert final["none"].prompt_logprobs is None
