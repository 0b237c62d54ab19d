"""LLM.beam_search(): beam groups run to completion on the in-process LLMEngine."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from hybridllm.engine.llm_engine import LLMEngine
from hybridllm.engine.pooling_engine import PoolingEngine
from hybridllm.entrypoints.generate.beam_search.utils import (
    BeamSearchOutput,
    to_beam_search_output,
)
from hybridllm.entrypoints.offline_loop import run_to_completion
from hybridllm.entrypoints.prompt_inputs import PromptType, is_single_prompt, prompt_of
from hybridllm.sampling_params import BeamSearchParams


class BeamSearchOfflineMixin:
    """beam_search(); needs `self.engine` (an LLMEngine for a generative model)."""

    engine: LLMEngine | PoolingEngine
    _counter: itertools.count

    def beam_search(
        self,
        prompts: PromptType | Sequence[PromptType],
        params: BeamSearchParams,
        use_tqdm: bool = False,
    ) -> list[BeamSearchOutput]:
        """One BeamSearchOutput per prompt, in input order: its best `beam_width` beams by
        score, each with prompt + generated `tokens`, their `text` and `cum_logprob`. The
        beam groups of all prompts run in one engine, batched with each other."""
        engine = self.engine
        if not isinstance(engine, LLMEngine):
            raise ValueError(
                f"LLM.beam_search() needs a generative model; {engine.config.served_model_name} "
                f"is an embedding model (task {engine.config.task!r})."
            )
        if not isinstance(params, BeamSearchParams):
            raise ValueError("params: give a BeamSearchParams.")
        batch = [prompts] if is_single_prompt(prompts) else list(prompts)  # type: ignore[list-item]
        ids = []
        for prompt in batch:
            rid = str(next(self._counter))
            engine.add_request(rid, prompt_of(prompt), params)
            ids.append(rid)
        tokenizer = engine.output_processor.tokenizer  # the offline engine decodes text
        assert tokenizer is not None
        results = []
        for output in run_to_completion(engine, ids, use_tqdm):
            result = to_beam_search_output(output)
            for seq in result.sequences:
                # vLLM's offline text: the whole sequence, prompt included, special tokens kept.
                seq.text = tokenizer.decode(seq.tokens, skip_special_tokens=False)
            results.append(result)
        return results
