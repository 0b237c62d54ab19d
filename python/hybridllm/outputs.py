"""What the engine returns per request: generated sequences, or a pooled embedding."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, overload

import msgspec

if TYPE_CHECKING:
    import torch

# position -> {token_id: Logprob}; the chosen token is always included.
LogprobsDict = dict[int, "Logprob"]


@dataclass
class Logprob:
    logprob: float
    rank: int  # 1-based rank of the token by logprob in the vocabulary
    decoded_token: str | None = None


class TokenIdsView(Sequence):
    """ids[start:stop] of an append-only list, without copying it: a running sequence's
    output ids as of one step (its later tokens are past `stop`). Outputs are made for every
    running request every step, and copying each sequence's ids made that grow with the
    output length; a finished sequence's output gets a plain list. Reads like the list
    (indexing, slicing, len, iteration) and compares equal to a list or tuple of its ids."""

    __slots__ = ("_ids", "_start", "_stop")

    def __init__(self, ids: list[int], start: int, stop: int) -> None:
        self._ids, self._start, self._stop = ids, start, stop

    def __len__(self) -> int:
        return self._stop - self._start

    @overload
    def __getitem__(self, i: int) -> int: ...
    @overload
    def __getitem__(self, i: slice) -> list[int]: ...
    def __getitem__(self, i: int | slice) -> int | list[int]:
        n = self._stop - self._start
        if isinstance(i, slice):
            start, stop, step = i.indices(n)
            if step == 1:  # the delta a consumer takes: only those ids are copied
                return self._ids[self._start + start : self._start + max(stop, start)]
            return self._ids[self._start : self._stop][i]
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("token index out of range")
        return self._ids[self._start + i]

    def __iter__(self) -> Any:
        return iter(self._ids[self._start : self._stop])

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (list, tuple, TokenIdsView)):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # equal to lists, which are unhashable

    def __repr__(self) -> str:
        return repr(list(self))


# Both are made for every running request every step: msgspec structs build in C, in about a
# third of a dataclass's time. Neither ever sits in a reference cycle, so the GC need not
# track them (gc=False).
class CompletionOutput(msgspec.Struct, gc=False):
    index: int
    text: str
    token_ids: list[int] | TokenIdsView  # a list once the sequence has finished
    cumulative_logprob: float | None
    logprobs: list[LogprobsDict] | None
    finish_reason: str | None = None  # "stop", "length", "abort", "error" or None
    stop_reason: int | str | None = None  # the stop token id or stop string that ended it

    def finished(self) -> bool:
        return self.finish_reason is not None


class RequestOutput(msgspec.Struct, gc=False):
    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    prompt_logprobs: list[LogprobsDict | None] | None
    outputs: list[CompletionOutput]
    finished: bool
    num_cached_tokens: int = 0
    metrics: dict[str, float] = msgspec.field(default_factory=dict)


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
