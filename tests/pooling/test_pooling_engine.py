"""The pooling engine: batches of whole inputs under the token budget, equal results however
they are batched, abort, and the step shape the async worker drives."""

from __future__ import annotations

import pytest
import torch

from hybridllm import PoolingParams
from hybridllm.config import EngineArgs
from hybridllm.core.pooling_scheduler import PoolingScheduler
from hybridllm.engine.pooling_engine import PoolingEngine
from tests.pooling.corpus import CORPUS

MIXED = [CORPUS[0], CORPUS[16], CORPUS[53], CORPUS[2], CORPUS[35], CORPUS[-1], CORPUS[24]]


def _vectors(outputs) -> torch.Tensor:
    return torch.tensor([o.outputs.embedding for o in outputs])


def test_batched_equals_one_by_one(embed_llm) -> None:
    batched = embed_llm.embed(MIXED, truncate_prompt_tokens=-1)
    lengths = [len(o.prompt_token_ids) for o in batched]
    assert min(lengths) <= 5 and max(lengths) == 256  # really mixed
    alone = [embed_llm.embed(t, truncate_prompt_tokens=-1)[0] for t in MIXED]
    diff = (_vectors(batched) - _vectors(alone)).abs().max().item()
    assert diff <= 1e-5
    assert [o.prompt_token_ids for o in batched] == [o.prompt_token_ids for o in alone]
    assert [o.request_id for o in batched] != [o.request_id for o in alone]
    assert all(o.finished for o in batched)


def test_small_budget_splits_steps_never_inputs(embed_model_path, embed_llm) -> None:
    engine = PoolingEngine.from_engine_args(
        EngineArgs(model=str(embed_model_path), max_num_batched_tokens=280, max_num_seqs=3)
    )
    for i, text in enumerate(MIXED):
        engine.add_request(f"r{i}", text, PoolingParams(truncate_prompt_tokens=-1))
    lens = [r.num_tokens for r in engine.requests.values()]
    assert lens == [3, 31, 123, 3, 37, 256, 13]
    steps, got = [], {}
    while engine.has_unfinished_requests():
        outputs = engine.step()
        steps.append([o.request_id for o in outputs])
        got |= {o.request_id: o.outputs.data for o in outputs}
    # FCFS, whole requests: 3 sequences at most (step 1), 280 tokens at most (step 2: 3 + 37
    # + 256 would be 296), the 256-token input whole in one step.
    assert steps == [["r0", "r1", "r2"], ["r3", "r4"], ["r5", "r6"]]
    assert not engine.scheduler.has_waiting()
    # The same vectors as one big batch (the session LLM's default budget of 2,048).
    one_batch = _vectors(embed_llm.embed(MIXED, truncate_prompt_tokens=-1))
    assert (torch.stack([got[f"r{i}"] for i in range(len(MIXED))]) - one_batch).abs().max() <= 1e-5


def test_one_call_runs_longest_first_and_answers_in_input_order(embed_model_path) -> None:
    """add_requests queues one call's inputs longest first (ties in input order), so equal
    lengths share steps; the offline call still answers in input order, with the vectors
    each input gets alone."""
    from hybridllm import LLM

    llm = LLM(model=str(embed_model_path), max_num_batched_tokens=300, max_num_seqs=4)
    engine = llm.engine
    texts = ["a b c", MIXED[5], "d e f", MIXED[4], "g h i", MIXED[1], "x"]
    engine.add_requests([(f"r{i}", t, PoolingParams(truncate_prompt_tokens=-1))
                         for i, t in enumerate(texts)])
    lens = {rid: r.num_tokens for rid, r in engine.requests.items()}
    assert list(lens.values()) == [5, 256, 5, 37, 5, 31, 3]
    steps = []
    while engine.has_unfinished_requests():
        steps.append([o.request_id for o in engine.step()])
    # 256 + 37 fit 300; then 31 + the three 5-token inputs (max_num_seqs 4), then the last.
    assert steps == [["r1", "r3"], ["r5", "r0", "r2", "r4"], ["r6"]]
    outs = llm.embed(texts, truncate_prompt_tokens=-1)
    assert [len(o.prompt_token_ids) for o in outs] == [5, 256, 5, 37, 5, 31, 3]
    alone = _vectors([llm.embed(t, truncate_prompt_tokens=-1)[0] for t in texts])
    assert (_vectors(outs) - alone).abs().max().item() <= 1e-5


def test_scheduler_takes_whole_requests_in_order(embed_llm) -> None:
    cfg = embed_llm.engine.config.scheduler
    sched = PoolingScheduler(type(cfg)(max_num_seqs=2, max_num_batched_tokens=10,
                                       max_model_len=8, enable_chunked_prefill=True))
    from hybridllm.sequence import PoolingRequest

    reqs = [PoolingRequest(str(i), None, [1] * n, PoolingParams(), True)
            for i, n in enumerate([4, 5, 2, 8, 1, 1, 1])]
    for r in reqs:
        sched.add(r)
    got = []
    while sched.has_waiting():
        got.append([r.request_id for r in sched.schedule().requests])
    # 4+5 fit; 2 then 8 would be 10 → fits exactly; 1+1 limited by max_num_seqs=2.
    assert got == [["0", "1"], ["2", "3"], ["4", "5"], ["6"]]


def test_abort_frees_the_request(embed_llm) -> None:
    engine = embed_llm.engine
    engine.add_request("keep", "first input", PoolingParams())
    engine.add_request("drop", "second input", PoolingParams())
    engine.add_request("keep2", "third input", PoolingParams())
    dropped = engine.requests["drop"]
    engine.abort_request("drop")
    engine.abort_request(["no-such-request"])  # unknown ids are ignored
    assert "drop" not in engine.requests
    assert dropped not in engine.scheduler.waiting
    assert len(engine.scheduler.waiting) == 2
    outputs = engine.step()
    assert [o.request_id for o in outputs] == ["keep", "keep2"]
    assert not engine.has_unfinished_requests() and not engine.scheduler.has_waiting()
    assert engine.step() == []
    # The id is free again, and a request added after an abort runs normally.
    engine.add_request("drop", "second input", PoolingParams())
    [out] = engine.step()
    assert out.request_id == "drop" and out.finished and out.outputs.data.shape == (384,)


def test_duplicate_request_id_is_refused(embed_llm) -> None:
    engine = embed_llm.engine
    engine.add_request("dup", "a", PoolingParams())
    try:
        with pytest.raises(ValueError, match=r"request id 'dup' is already in use"):
            engine.add_request("dup", "b", PoolingParams())
    finally:
        engine.abort_request("dup")
    assert not engine.has_unfinished_requests()
    # add_requests is all or none: a duplicate inside the batch, or one bad input, queues none.
    with pytest.raises(ValueError, match=r"request id 'x' is already in use"):
        engine.add_requests([("x", "a", None), ("y", "b", None), ("x", "c", None)])
    with pytest.raises(ValueError, match=r"token id 99999 is out of vocabulary"):
        engine.add_requests([("x", "a", None), ("y", [101, 99999, 102], None)])
    assert not engine.has_unfinished_requests() and not engine.scheduler.has_waiting()


def test_step_shape_for_the_async_worker(embed_llm) -> None:
    """step_requests + make_outputs as AsyncLLMEngine uses them; while_running once per step
    that ran, before the forward pass on CPU, never for an empty step."""
    engine = embed_llm.engine
    calls = []
    assert engine.step_requests(lambda: calls.append("empty")) == []
    engine.add_request("a", "one", PoolingParams(normalize=False))
    engine.add_request("b", [101, 2048, 102], PoolingParams())
    touched = engine.step_requests(lambda: calls.append("ran"))
    assert calls == ["ran"]
    assert [r.request_id for r in touched] == ["a", "b"] and all(r.finished for r in touched)
    outs = engine.make_outputs(touched)
    assert [o.prompt_token_ids for o in outs] == [[101, 2028, 102], [101, 2048, 102]]
    assert abs(outs[1].outputs.data.norm().item() - 1.0) < 1e-6
    assert abs(outs[0].outputs.data.norm().item() - 1.0) > 0.1
    assert engine.stats.requests_finished_total >= 2


def test_budget_smaller_than_max_model_len_is_refused(embed_model_path) -> None:
    with pytest.raises(ValueError, match=r"max_num_batched_tokens \(128\) is smaller than "
                       r"max_model_len \(256\): an encoder input is never split"):
        EngineArgs(model=str(embed_model_path), max_num_batched_tokens=128).resolve()
