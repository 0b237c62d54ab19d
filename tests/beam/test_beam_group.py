"""core/beam_search.py's group step on hand-made candidates: transformers' rules for what
keeps running, what finishes (only among the best beam_width), the length-penalized score,
and when early_stopping False / True / "never" end the group."""

from __future__ import annotations

import pytest

from hybridllm.core.beam_search import BeamGroup
from hybridllm.sampling_params import BeamSearchParams

EOS = 2


def group(**kw) -> BeamGroup:
    params = BeamSearchParams(**{"beam_width": 2, "max_tokens": 10, **kw})
    return BeamGroup(params, frozenset({EOS}), params.max_tokens)


def test_first_step_forks_the_prompt_beam() -> None:
    g = group()
    r = g.step([0.0], [([-0.1, -0.2, -0.3, -0.4], [5, 6, 7, 8])], [[]])
    assert [(c.parent, c.token) for c in r.running] == [(0, 5), (0, 6)]
    assert [c.cum_logprob for c in r.running] == pytest.approx([-0.1, -0.2])
    assert not r.done and g.finished == []


def test_eos_finishes_only_among_the_best_width() -> None:
    g = group(length_penalty=2.0)
    # beam 0's EOS ranks first: finished with score -0.5 / 3 ** 2; beam 1's EOS ranks 4th.
    r = g.step([-0.3, -0.4], [([-0.2, -0.3, -0.9, -1.0], [EOS, 9, 10, 11]),
                              ([-0.1, -0.5, -0.6, -0.7], [12, EOS, 13, 14])], [[3, 4], [3, 5]])
    assert [(c.parent, c.token) for c in r.running] == [(1, 12), (0, 9)]
    assert len(g.finished) == 1
    score, result = g.finished[0]
    assert score == pytest.approx(-0.5 / 9)
    assert result.token_ids == [3, 4, EOS] and result.finish_reason == "stop"
    assert result.cum_logprob == pytest.approx(-0.5)


@pytest.mark.parametrize(("early", "done"), [(True, True), (False, True), ("never", False)])
def test_early_stopping(early: bool | str, done: bool) -> None:
    g = group(early_stopping=early)
    # Both of the best two candidates end: the group is full of finished beams.
    r = g.step([0.0, -5.0], [([-1.0, -1.1, -1.5, -1.6], [EOS, EOS, 4, 5]),
                             ([-0.1, -0.2, -0.3, -0.4], [6, 7, 8, 9])], [[3], [4]])
    assert len(g.finished) == 2
    # False: the best running beam (-1.5 / 2) cannot beat the worst finished (-1.1 / 2);
    # "never" with length_penalty 1 bounds it at max length (-1.5 / 10): it still could.
    assert r.done is done


def test_max_tokens_ends_every_beam_as_length() -> None:
    g = group(max_tokens=2)
    r = g.step([-1.0, -2.0], [([-0.1, -0.2, -0.3, -0.4], [4, 5, 6, 7]),
                              ([-0.1, -0.2, -0.3, -0.4], [8, 9, 10, 11])], [[3], [3]])
    assert r.done and r.running == []
    assert [(res.token_ids, res.finish_reason) for res in g.results()] == \
        [([3, 4], "length"), ([3, 5], "length")]
