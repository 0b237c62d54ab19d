"""The last layer's MLP runs on the rows the LM head reads only (model_runner.kept_rows): the
rows are chosen and renumbered right, the model really gets fewer rows in a prefill step, and
every output (tokens, logprobs, prompt logprobs) is the same bits as running every row."""

from __future__ import annotations

import pytest

from hybridllm import LLM, SamplingParams
from hybridllm.executor import model_runner
from hybridllm.executor.model_runner import kept_rows


@pytest.mark.parametrize(
    ("logit_rows", "num_rows", "want"),
    [
        # A pure decode step, or every row asked for: nothing to leave out.
        ([None], 4, (None, [None])),
        ([[0, 1, 2, 3]], 4, (None, [[0, 1, 2, 3]])),
        # Decode rows and a prompt chunk that reaches its end (row 9): those rows, in order.
        ([[0, 1, 9]], 10, ([0, 1, 9], [None])),
        # Sampling rows plus one request's prompt-logprob rows (overlapping at row 5).
        ([[0, 5], [3, 4, 5]], 8, ([0, 3, 4, 5], [[0, 3], [1, 2, 3]])),
        # Chunks short of their prompts' ends: no row read, the last one keeps shapes whole.
        ([], 6, ([5], [])),
    ],
)
def test_kept_rows(logit_rows, num_rows, want) -> None:
    assert kept_rows(logit_rows, num_rows) == want


def _outputs(llm: LLM) -> list[tuple]:
    prompts = [
        "The capital of France is",
        "Write a long list of the planets of the solar system, one per line, with their moons:",
        "1, 2, 3, 4, 5,",
    ]
    params = [
        SamplingParams(temperature=0, max_tokens=12, logprobs=3),
        SamplingParams(temperature=0, max_tokens=12, logprobs=3, prompt_logprobs=2),
        SamplingParams(temperature=0, max_tokens=12),
    ]
    outs = llm.generate(prompts, params, use_tqdm=False)
    return [
        (o.outputs[0].token_ids, o.outputs[0].logprobs, o.prompt_logprobs) for o in outs
    ]


def test_same_outputs_with_fewer_rows(model_path, monkeypatch) -> None:
    # A 16-token budget splits the prompts into chunks that share steps with decode rows.
    llm = LLM(model=str(model_path), max_num_batched_tokens=16, max_num_seqs=4,
              enable_prefix_caching=False, seed=0)
    seen: list[tuple[int, int | None]] = []  # (rows in the step, rows kept)
    forward = llm.engine.runner.model.forward

    def spy(input_ids, *args):
        keep = args[4] if len(args) > 4 else None
        seen.append((input_ids.shape[0], None if keep is None else keep.shape[0]))
        return forward(input_ids, *args)

    monkeypatch.setattr(llm.engine.runner.model, "forward", spy)
    pruned = _outputs(llm)
    # Prefill steps really carried fewer rows through the last layer's MLP.
    assert any(kept is not None and kept < rows for rows, kept in seen)
    assert all(kept is None or kept <= rows for rows, kept in seen)

    monkeypatch.setattr(model_runner, "kept_rows", lambda rows, n: (None, rows))
    seen.clear()
    every = _outputs(llm)
    assert seen and all(kept is None for _, kept in seen)
    assert pruned == every
    assert pruned[1][2] is not None and len(pruned[1][2]) > 16  # prompt logprobs were asked
