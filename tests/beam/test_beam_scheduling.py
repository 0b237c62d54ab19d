"""Beam groups scheduled with everything else: the same beams under chunked prefill of the
prompt, a small token budget, no prefix caching, and preemption of whole groups by
recompute; prefix caching still serves the prompt; ordinary requests in the same batch are
unchanged; bad parameters are refused naming the field."""

from __future__ import annotations

import pytest

from hybridllm import LLM, BeamSearchParams, SamplingParams
from tests.golden.kinds import PROMPTS

PARAMS = BeamSearchParams(beam_width=4, max_tokens=16, ignore_eos=True)


@pytest.fixture(scope="module")
def reference(model_path) -> tuple[list[list[list[int]]], list[list[int]]]:
    llm = LLM(model=str(model_path))
    beams = [[s.tokens for s in o.sequences] for o in llm.beam_search(PROMPTS[:4], PARAMS)]
    greedy = [o.outputs[0].token_ids for o in llm.generate(
        PROMPTS[4:], SamplingParams(temperature=0, max_tokens=16, min_tokens=16),
        use_tqdm=False)]
    return beams, greedy


CONFIGS = {
    "no_prefix_caching": {"enable_prefix_caching": False},
    "chunked_small_budget": {"max_num_batched_tokens": 8, "max_num_seqs": 16},
    # 12 blocks of 16 tokens: the four groups cannot all stay resident.
    "forced_preemption": {"num_gpu_blocks_override": 12, "max_model_len": 64},
}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_same_beams_under_any_schedule(name: str, reference, model_path) -> None:
    beams, greedy = reference
    llm = LLM(model=str(model_path), **CONFIGS[name])
    engine = llm.engine
    for i, prompt in enumerate(PROMPTS[:4]):  # beam groups and plain requests side by side
        engine.add_request(f"b{i}", prompt, PARAMS)
        engine.add_request(f"g{i}", PROMPTS[4 + i],
                           SamplingParams(temperature=0, max_tokens=16, min_tokens=16))
    done = {}
    while engine.has_unfinished_requests():
        for out in engine.step():
            if out.finished:
                done[out.request_id] = out
    got = [[done[f"b{i}"].prompt_token_ids + o.token_ids for o in done[f"b{i}"].outputs]
           for i in range(4)]
    assert got == beams
    assert [done[f"g{i}"].outputs[0].token_ids for i in range(4)] == greedy
    if name == "forced_preemption":
        assert engine.scheduler.num_preemptions > 0
    assert engine.kv.num_free_blocks == engine.kv.num_blocks


def test_prefix_cache_serves_the_prompt(model_path) -> None:
    llm = LLM(model=str(model_path))
    prompt = " ".join(["The history of the city is long and"] * 8)
    first = llm.beam_search(prompt, PARAMS)
    engine = llm.engine
    engine.add_request("again", prompt, PARAMS)
    while engine.has_unfinished_requests():
        for out in engine.step():
            again = out
    n = len(again.prompt_token_ids)
    assert llm.engine.kv.prefix_hits >= (n - 1) // 16 * 16 > 0
    assert [again.prompt_token_ids + o.token_ids for o in again.outputs] == \
        [s.tokens for s in first[0].sequences]


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [({"beam_width": 0}, "beam_width"), ({"max_tokens": 0}, "max_tokens"),
     ({"temperature": 0.7}, "temperature"), ({"early_stopping": "sometimes"}, "early_stopping")],
)
def test_bad_params_name_the_field(kwargs: dict, field: str) -> None:
    base = {"beam_width": 2, "max_tokens": 4}
    with pytest.raises(ValueError, match=field):
        BeamSearchParams(**{**base, **kwargs})


def test_running_set_within_max_num_seqs(model_path) -> None:
    """max_num_seqs 6: beam groups of width 4 and 2 count as 4 and 2 sequences from their
    admission on, so their forks never push the running set past 6 while plain requests (n=1,
    n=2) mix in; every request still gets what it gets alone."""
    llm = LLM(model=str(model_path), max_num_seqs=6)
    engine = llm.engine
    params = {
        "b4": BeamSearchParams(beam_width=4, max_tokens=6, ignore_eos=True),
        "b2": BeamSearchParams(beam_width=2, max_tokens=6, ignore_eos=True),
        "s1": SamplingParams(temperature=0, max_tokens=6, min_tokens=6),
        "s2": SamplingParams(temperature=0.8, seed=7, n=2, max_tokens=6, min_tokens=6),
        "b4x": BeamSearchParams(beam_width=4, max_tokens=6, ignore_eos=True),
    }
    alone = {}
    for i, (rid, p) in enumerate(params.items()):
        engine.add_request(rid, PROMPTS[i], p)
        while engine.has_unfinished_requests():
            for out in engine.step():
                alone[rid] = out
    for i, (rid, p) in enumerate(params.items()):
        engine.add_request(f"{rid}-mixed", PROMPTS[i], p)
    sizes, done = [], {}
    while engine.has_unfinished_requests():
        for out in engine.step():
            done[out.request_id.removesuffix("-mixed")] = out
        sizes.append(len(engine.scheduler.running))
        assert sizes[-1] <= 6, sizes
        assert engine.scheduler.num_seats <= 6
    assert max(sizes) == 6, sizes  # the limit is reached, not just kept
    for rid, out in alone.items():
        assert [o.token_ids for o in done[rid].outputs] == [o.token_ids for o in out.outputs]
        assert len(out.outputs) == {"b4": 4, "b2": 2, "s1": 1, "s2": 2, "b4x": 4}[rid]
    assert engine.scheduler.num_seats == 0
    assert engine.kv.num_free_blocks == engine.kv.num_blocks


def test_beam_wider_than_max_num_seqs_is_refused(model_path) -> None:
    llm = LLM(model=str(model_path), max_num_seqs=3)
    with pytest.raises(ValueError, match=r"beam_width \(4\) must be at most max_num_seqs \(3"):
        llm.beam_search(PROMPTS[0], BeamSearchParams(beam_width=4, max_tokens=4))
    assert not llm.engine.has_unfinished_requests()
    out = llm.beam_search(PROMPTS[0], BeamSearchParams(beam_width=3, max_tokens=4))
    assert len(out[0].sequences) == 3
