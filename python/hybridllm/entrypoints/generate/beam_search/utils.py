"""Beam-search result types shared by the offline and online paths (vLLM's names)."""

from __future__ import annotations

from dataclasses import dataclass, field

from hybridllm.outputs import RequestOutput


@dataclass
class BeamSearchSequence:
    """One returned beam: `tokens` are the prompt's ids followed by the generated ones."""

    tokens: list[int]
    cum_logprob: float = 0.0
    text: str | None = None
    finish_reason: str | None = None
    stop_reason: int | str | None = None


@dataclass
class BeamSearchOutput:
    """A prompt's best beams, best score first."""

    sequences: list[BeamSearchSequence] = field(default_factory=list)


def to_beam_search_output(output: RequestOutput) -> BeamSearchOutput:
    """The engine's finished beam request as vLLM's BeamSearchOutput (text set by the caller)."""
    return BeamSearchOutput([
        BeamSearchSequence(
            tokens=list(output.prompt_token_ids) + list(o.token_ids),
            cum_logprob=o.cumulative_logprob or 0.0,
            finish_reason=o.finish_reason,
            stop_reason=o.stop_reason,
        )
        for o in output.outputs
    ])
