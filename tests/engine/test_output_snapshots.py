"""A running request's outputs are snapshots taken without copying its ids (TokenIdsView):
read after later steps they still hold exactly the ids of their own step, read like lists,
and a finished sequence's output is a plain list (what LLM.generate returns)."""

from __future__ import annotations

import pytest

from hybridllm.config import EngineArgs
from hybridllm.engine.llm_engine import LLMEngine
from hybridllm.outputs import TokenIdsView
from hybridllm.sampling_params import SamplingParams


def test_view_reads_like_the_list_it_stands_for():
    ids = [5, 6, 7, 8, 9, 10]
    view = TokenIdsView(ids, 2, 5)  # ids[2:5]
    want = [7, 8, 9]
    assert len(view) == 3 and list(view) == want and view == want and view == tuple(want)
    assert view != [7, 8] and view != [7, 8, 9, 10]
    assert [view[i] for i in range(-3, 3)] == [7, 8, 9, 7, 8, 9]
    for i in (3, -4):
        with pytest.raises(IndexError):
            view[i]
    for sl in (slice(1, None), slice(None, 2), slice(-2, None), slice(5, None), slice(2, 1),
               slice(None, None, 2), slice(None, None, -1)):
        assert view[sl] == want[sl], sl
        assert isinstance(view[sl], list)
    assert repr(view) == "[7, 8, 9]" and bool(TokenIdsView(ids, 3, 3)) is False
    ids.append(11)  # the list grows: the view still ends where it was taken
    assert list(view) == want and view[-1] == 9 and view[1:] == [8, 9]
    with pytest.raises(TypeError):
        hash(view)


def test_outputs_are_snapshots_of_their_step_and_lists_once_finished():
    args = EngineArgs(mock_engine=True, device="cpu", max_num_seqs=4)
    engine = LLMEngine.from_engine_args(args, detokenize=False)
    engine.add_request("a", [1000 + j for j in range(5)],
                       SamplingParams(temperature=0, ignore_eos=True, max_tokens=6))
    seen = []
    while engine.has_unfinished_requests():
        seen += engine.step()
    assert len(seen) == 6
    # MockModelRunner's token for a sequence of n tokens is 1000 + n % 256.
    final = [1000 + n for n in range(5, 11)]
    for step, out in enumerate(seen, start=1):
        ids = out.outputs[0].token_ids
        assert ids == final[:step] and len(ids) == step
        assert isinstance(ids, TokenIdsView) is (not out.finished)
    assert type(seen[-1].outputs[0].token_ids) is list
    assert seen[-1].outputs[0].finish_reason == "length"
