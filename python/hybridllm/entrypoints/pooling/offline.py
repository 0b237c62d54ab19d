"""LLM.embed() and LLM.encode(): pooled vectors of many inputs from an in-process PoolingEngine."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence
from typing import Any

from hybridllm.engine.llm_engine import LLMEngine
from hybridllm.engine.pooling_engine import PoolingEngine
from hybridllm.entrypoints.offline_loop import run_to_completion
from hybridllm.entrypoints.pooling.inputs import parse_embedding_inputs
from hybridllm.outputs import EmbeddingRequestOutput, PoolingRequestOutput
from hybridllm.pooling_params import PoolingParams


class PoolingOfflineMixin:
    """embed() and encode(); needs `self.engine` (a PoolingEngine for an embedding model)."""

    engine: PoolingEngine | LLMEngine
    _counter: itertools.count

    def embed(
        self,
        prompts: Any,
        pooling_params: PoolingParams | Sequence[PoolingParams] | None = None,
        truncate_prompt_tokens: int | None = None,
        use_tqdm: bool = False,
    ) -> list[EmbeddingRequestOutput]:
        """One embedding per input (strings, token-id lists, or a list of either), in input
        order; normalized as the model's sentence-transformers config says unless
        pooling_params.normalize is set. `truncate_prompt_tokens` (-1: the model's limit)
        overrides the params' own."""
        engine = self._pooling_engine("embed")
        outputs = self._pool(engine, prompts, pooling_params, truncate_prompt_tokens, None,
                             use_tqdm)
        return [EmbeddingRequestOutput.from_base(o) for o in outputs]

    def encode(
        self,
        prompts: Any,
        pooling_params: PoolingParams | Sequence[PoolingParams] | None = None,
        truncate_prompt_tokens: int | None = None,
        use_tqdm: bool = False,
    ) -> list[PoolingRequestOutput]:
        """The pooled hidden state of each input (outputs.data, a CPU tensor), not normalized
        unless pooling_params.normalize is True."""
        engine = self._pooling_engine("encode")
        return self._pool(engine, prompts, pooling_params, truncate_prompt_tokens, False,
                          use_tqdm)

    def _pooling_engine(self, method: str) -> PoolingEngine:
        engine = self.engine
        if not isinstance(engine, PoolingEngine):
            raise ValueError(
                f"LLM.{method}() needs an embedding model; {engine.config.served_model_name} "
                f"is a generative model (task {engine.config.task!r}): use LLM.generate()."
            )
        return engine

    def _pool(
        self,
        engine: PoolingEngine,
        prompts: Any,
        pooling_params: PoolingParams | Sequence[PoolingParams] | None,
        truncate_prompt_tokens: int | None,
        default_normalize: bool | None,
        use_tqdm: bool,
    ) -> list[PoolingRequestOutput]:
        batch = parse_embedding_inputs(prompts, field="prompts")
        params = _params_per_input(pooling_params, len(batch))
        overrides: dict[str, Any] = {}
        if truncate_prompt_tokens is not None:
            overrides["truncate_prompt_tokens"] = truncate_prompt_tokens
        requests = []
        for prompt, p in zip(batch, params):
            changes = dict(overrides)
            if p.normalize is None and default_normalize is not None:
                changes["normalize"] = default_normalize
            requests.append((str(next(self._counter)), prompt, dataclasses.replace(p, **changes)))
        engine.add_requests(requests)  # all or none: a refused call leaves nothing queued
        ids = [rid for rid, _, _ in requests]
        return run_to_completion(engine, ids, use_tqdm)


def _params_per_input(
    pooling_params: PoolingParams | Sequence[PoolingParams] | None, n: int
) -> list[PoolingParams]:
    if pooling_params is None or isinstance(pooling_params, PoolingParams):
        return [pooling_params or PoolingParams()] * n
    if (
        isinstance(pooling_params, (list, tuple))
        and len(pooling_params) == n
        and all(isinstance(p, PoolingParams) for p in pooling_params)
    ):
        return list(pooling_params)
    got = (
        f"{len(pooling_params)} items" if isinstance(pooling_params, (list, tuple))
        else type(pooling_params).__name__
    )
    raise ValueError(
        f"pooling_params: give one PoolingParams, or a list of one per input ({n}); got {got}."
    )
