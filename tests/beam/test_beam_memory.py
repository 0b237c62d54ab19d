"""Beams share KV blocks: a beam_width=4 request on a 200-token prompt never holds more than
prompt blocks + 4 x (generated blocks + 1), checked through the KV-cache manager after every
step, and every block is free once it ends or is aborted."""

from __future__ import annotations

import pytest

from hybridllm import LLM, BeamSearchParams
from hybridllm.engine.llm_engine import LLMEngine

PROMPT_LEN = 200
MAX_TOKENS = 40


def _prompt(engine: LLMEngine) -> list[int]:
    text = " ".join(f"item {i} of the inventory list," for i in range(200))
    ids = engine.tokenizer.encode(text, add_special_tokens=False).ids[:PROMPT_LEN]
    assert len(ids) == PROMPT_LEN
    return ids


def _used(engine: LLMEngine) -> int:
    kv = engine.kv
    held = sum(1 for c in kv.ref_counts if c > 0)
    assert held == kv.num_blocks - kv.num_free_blocks  # ref counts and free list agree
    return held


@pytest.fixture(scope="module")
def llm(model_path) -> LLM:
    return LLM(model=str(model_path))


@pytest.mark.parametrize("abort_after", [None, 9])
def test_beam_group_block_bound(llm: LLM, abort_after: int | None) -> None:
    engine = llm.engine
    assert isinstance(engine, LLMEngine)
    bs = engine.kv.block_size
    ids = _prompt(engine)
    engine.add_request("mem", ids, BeamSearchParams(beam_width=4, max_tokens=MAX_TOKENS,
                                                   ignore_eos=True))
    request = engine.requests["mem"]
    prompt_blocks = -(-PROMPT_LEN // bs)
    peak, steps, done = 0, 0, None
    while engine.has_unfinished_requests():
        outs = engine.step()
        steps += 1
        generated = max((s.num_output_tokens for s in request.seqs), default=MAX_TOKENS)
        used = _used(engine)
        assert used <= prompt_blocks + 4 * (-(-generated // bs) + 1), (steps, used)
        if request.seqs:
            assert len(request.seqs) == 4 or steps == 1
            # The prompt's full blocks are one set of blocks, shared by all live beams.
            first = {tuple(s.block_table[: PROMPT_LEN // bs]) for s in request.seqs}
            assert len(first) == 1
        peak = max(peak, used)
        done = next((o for o in outs if o.request_id == "mem" and o.finished), done)
        if abort_after is not None and steps == abort_after:
            engine.abort_request("mem")
    assert _used(engine) == 0
    assert engine.kv.num_free_blocks == engine.kv.num_blocks
    assert not engine.beams.groups and not engine.scheduler.running
    if abort_after is None:
        assert done is not None and len(done.outputs) == 4
        assert all(len(o.token_ids) == MAX_TOKENS for o in done.outputs)
        # Shared: well under four private copies of the prompt.
        assert peak < 4 * prompt_blocks
    else:
        assert steps == abort_after + 1 and (done is None or done.outputs == [])
