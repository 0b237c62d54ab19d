"""Greedy output of LLM.generate equals transformers' generate, token for token, whatever the
scheduling: prefix caching, chunked prefill under a small budget, forced preemption.

transformers' tokens are the `greedy` golden reference (tests/golden); test_live.py recomputes
one prompt of it in every run."""

from __future__ import annotations

import pytest

from hybridllm import LLM, SamplingParams
from tests import golden
from tests.golden.kinds import GREEDY_MAX_TOKENS as MAX_TOKENS
from tests.golden.kinds import PROMPTS


@pytest.fixture(scope="module")
def expected(model_path) -> list[list[int]]:
    tokens = golden.load("greedy")["tokens"]
    assert [len(t) for t in tokens] == [MAX_TOKENS] * len(PROMPTS)
    return tokens


CONFIGS = {
    "default": {},
    "no_prefix_caching": {"enable_prefix_caching": False},
    "chunked_small_budget": {"max_num_batched_tokens": 24, "max_num_seqs": 4},
    "no_chunked_prefill": {"enable_chunked_prefill": False, "max_model_len": 512},
    # 14 blocks of 16 tokens: the 8 prompts cannot all stay resident for all their tokens.
    "forced_preemption": {"num_gpu_blocks_override": 14, "max_model_len": 128},
}


def check_greedy(llm: LLM, name: str, expected: list[list[int]], max_tokens: int) -> list:
    """PROMPTS' greedy tokens under CONFIGS[name] are `expected`; the scheduling really
    happened (preemptions; prefix-cache hits on a second pass). Returns the outputs."""
    # min_tokens masks EOS exactly as transformers' min_new_tokens does.
    params = SamplingParams(temperature=0, max_tokens=max_tokens, min_tokens=max_tokens)
    outputs = llm.generate(PROMPTS, params)
    got = [o.outputs[0].token_ids for o in outputs]
    assert [len(g) for g in got] == [max_tokens] * len(PROMPTS)
    assert got == expected
    if name == "forced_preemption":
        assert llm.engine.scheduler.num_preemptions > 0
    if name == "default":
        # Same prompts again: every full prompt block is a prefix-cache hit now.
        again = llm.generate(PROMPTS, params)
        assert [o.outputs[0].token_ids for o in again] == expected
        hits = [o.num_cached_tokens for o in again]
        assert hits == [(len(o.prompt_token_ids) - 1) // 16 * 16 for o in again]
    return outputs


@pytest.mark.parametrize("name", list(CONFIGS))
def test_greedy_matches_transformers(name: str, expected: list[list[int]], model_path) -> None:
    check_greedy(LLM(model=str(model_path), **CONFIGS[name]), name, expected, MAX_TOKENS)
