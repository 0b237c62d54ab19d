"""What the engine returns per request: generated sequences, or a pooled embedding."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

# position -> {token_id: Logprob}; the chosen token is always included.
LogprobsDict = dict[int, "Logprob"]


@dataclass
class Logprob:
    logprob: float
    rank: int  # 1-based rank of the token by logprob in the vocabulary
    decoded_token: str | None = None


@dataclass
class CompletionOutput:
    index: int
    text: str
    token_ids: list[int]
    cumulative_logprob: float | None
    logprobs: list[LogprobsDict] | None
    finish_reason: str | None = None  # "stop", "length", "abort", "error" or None
    stop_reason: int | str | None = None  # the stop token id or stop string that ended it

    def finished(self) -> bool:
        return self.finish_reason is not None


@dataclass
class RequestOutput:
    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    prompt_logprobs: list[LogprobsDict | None] | None
    outputs: list[CompletionOutput]
    finished: bool
    num_cached_tokens: int = 0
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass
class PoolingOutput:
    data: torch.Tensor  # the pooled hidden state of one input: [hidden_size], fp32, on the CPU


@dataclass
class PoolingRequestOutput:
    """One pooling request's result (vLLM's fields); a pooling request finishes in one step."""

    request_id: str
    outputs: PoolingOutput
    prompt_token_ids: list[int]
    finished: bool


@dataclass
class EmbeddingOutput:
    embedding: list[float]

    @classmethod
    def from_base(cls, output: PoolingOutput) -> EmbeddingOutput:
        if output.data.dim() != 1:
            raise ValueError(f"an embedding is one vector, got shape {tuple(output.data.shape)}")
        return cls(output.data.tolist())

    @property
    def hidden_size(self) -> int:
        return len(self.embedding)


@dataclass
class EmbeddingRequestOutput:
    request_id: str
    outputs: EmbeddingOutput
    prompt_token_ids: list[int]
    finished: bool

    @classmethod
    def from_base(cls, output: PoolingRequestOutput) -> EmbeddingRequestOutput:
        return cls(
            output.request_id,
            EmbeddingOutput.from_base(output.outputs),
            output.prompt_token_ids,
            output.finished,
        )
