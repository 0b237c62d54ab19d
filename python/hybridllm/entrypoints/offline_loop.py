"""The offline `LLM`'s loop: step an in-process engine until the given requests are done."""

from __future__ import annotations

from typing import Protocol, TypeVar

from tqdm import tqdm


class _Output(Protocol):
    request_id: str
    finished: bool


OutputT = TypeVar("OutputT", bound=_Output)


class _Engine(Protocol[OutputT]):
    def has_unfinished_requests(self) -> bool: ...
    def step(self) -> list[OutputT]: ...
    def abort_request(self, request_ids: list[str]) -> None: ...


def run_to_completion(
    engine: _Engine[OutputT], request_ids: list[str], use_tqdm: bool
) -> list[OutputT]:
    """Each request's final output, in the order given; whatever is left when this is
    interrupted is aborted (an LLMEngine or a PoolingEngine). With `use_tqdm` a "Processed
    prompts" bar shows on a terminal; tqdm keeps it quiet when stderr is not one."""
    done: dict[str, OutputT] = {}
    bar = tqdm(total=len(request_ids), desc="Processed prompts",
               disable=None if use_tqdm else True)
    try:
        while engine.has_unfinished_requests():
            for out in engine.step():
                if out.finished:
                    done[out.request_id] = out
                    bar.update(1)
    finally:
        bar.close()
        engine.abort_request([r for r in request_ids if r not in done])
    return [done[r] for r in request_ids]
