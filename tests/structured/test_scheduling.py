"""Constrained greedy outputs do not depend on how they were scheduled: chunked prefill under
a small budget, prefix-cache hits, and preemption by recompute (the matcher is kept: the
recomputed tokens are the ones it has consumed) give the same valid JSON."""

from __future__ import annotations

import json

import jsonschema
import pytest

from hybridllm import LLM, SamplingParams, StructuredOutputsParams
from tests.structured.test_structured_outputs import PERSON, chat

PROMPTS = [
    chat(f"Describe {who} as JSON.")
    for who in ("a baker in Paris", "an old sailor", "a student in Rome", "a child in Oslo",
                "a famous painter", "a quiet librarian")
]
PARAMS = SamplingParams(temperature=0, max_tokens=48,
                        structured_outputs=StructuredOutputsParams(json=PERSON))


def run(llm: LLM) -> list[tuple[list[int], str | None]]:
    outs = llm.chat(PROMPTS, PARAMS, use_tqdm=False)
    return [(o.outputs[0].token_ids, o.outputs[0].finish_reason) for o in outs]


@pytest.fixture(scope="module")
def reference(model_path) -> list[tuple[list[int], str | None]]:
    llm = LLM(model=str(model_path), seed=0)
    first = run(llm)
    finished = [ids for ids, reason in first if reason == "stop"]
    assert len(finished) >= 4  # most of them end within max_tokens
    tok = llm.get_tokenizer()
    for ids in finished:
        jsonschema.validate(json.loads(tok.decode(ids)), PERSON)
    # Again: every full prompt block is a prefix-cache hit now, and nothing changes.
    again = llm.chat(PROMPTS, PARAMS, use_tqdm=False)
    assert all(o.num_cached_tokens >= 16 for o in again)
    assert [(o.outputs[0].token_ids, o.outputs[0].finish_reason) for o in again] == first
    return first


CONFIGS = {
    "chunked_small_budget": {"max_num_batched_tokens": 24, "max_num_seqs": 4},
    # 12 blocks of 16 tokens: six ~40-token prompts cannot all stay resident while they grow.
    "forced_preemption": {"num_gpu_blocks_override": 12, "max_model_len": 160},
}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_same_outputs_whatever_the_schedule(name: str, reference, model_path) -> None:
    llm = LLM(model=str(model_path), seed=0, **CONFIGS[name])
    assert run(llm) == reference
    if name == "forced_preemption":
        assert llm.engine.scheduler.num_preemptions > 0
