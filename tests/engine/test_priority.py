"""`priority` in the engine and the offline LLM (vLLM's `LLM.generate(..., priority=[...])`):
with --scheduling-policy priority one seat goes to the lowest value first, ties in arrival
order; under fcfs a non-zero priority is refused with the API's message."""

from __future__ import annotations

from pathlib import Path

import pytest

from hybridllm.config import EngineArgs
from hybridllm.engine.llm_engine import LLMEngine
from hybridllm.entrypoints.llm import LLM
from hybridllm.sampling_params import ParamError, SamplingParams

PARAMS = SamplingParams(max_tokens=3, ignore_eos=True)
PROMPT = [504, 3575, 282]


def _finish_order(engine: LLMEngine) -> list[str]:
    order = []
    while engine.has_unfinished_requests():
        order += [out.request_id for out in engine.step() if out.finished]
    return order


def test_one_seat_goes_by_priority_then_arrival(model_path: Path) -> None:
    engine = LLMEngine.from_engine_args(EngineArgs(
        model=str(model_path), mock_engine=True, max_num_seqs=1, scheduling_policy="priority"))
    for rid, prio in (("a", 0), ("b", 2), ("c", -1), ("d", 0), ("e", -1)):
        engine.add_request(rid, PROMPT, PARAMS, priority=prio)
    assert _finish_order(engine) == ["c", "e", "a", "d", "b"]


def test_fcfs_refuses_a_priority(model_path: Path) -> None:
    engine = LLMEngine.from_engine_args(EngineArgs(model=str(model_path), mock_engine=True))
    with pytest.raises(ParamError) as e:
        engine.add_request("a", PROMPT, PARAMS, priority=1)
    assert e.value.param == "priority"
    assert str(e.value) == ("Got priority 1 but Priority scheduling is not enabled (start the "
                            "server with --scheduling-policy priority).")
    assert not engine.has_unfinished_requests()
    engine.add_request("b", PROMPT, PARAMS, priority=0)
    assert _finish_order(engine) == ["b"]


def test_offline_generate_takes_one_priority_per_prompt(model_path: Path) -> None:
    llm = LLM(model=str(model_path), mock_engine=True, max_num_seqs=1,
              scheduling_policy="priority")
    outs = llm.generate([PROMPT, PROMPT + [11]], PARAMS, use_tqdm=False, priority=[5, -5])
    assert [len(o.prompt_token_ids) for o in outs] == [3, 4]  # input order, whatever ran first
    assert [len(o.outputs[0].token_ids) for o in outs] == [3, 3]
    with pytest.raises(ValueError, match="got 1 priorities for 2 prompts; give one per prompt."):
        llm.generate([PROMPT, PROMPT], PARAMS, use_tqdm=False, priority=[1])
