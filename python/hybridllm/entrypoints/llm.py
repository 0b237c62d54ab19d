"""The offline `LLM` class: batch generation and chat over an in-process LLMEngine, or
embeddings over a PoolingEngine (entrypoints/pooling/offline.py) for an embedding model."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

from hybridllm.config import EngineArgs
from hybridllm.engine.llm_engine import LLMEngine
from hybridllm.engine.pooling_engine import PoolingEngine
from hybridllm.entrypoints.generate.beam_search.offline import BeamSearchOfflineMixin
from hybridllm.entrypoints.offline_loop import run_to_completion
from hybridllm.entrypoints.pooling.offline import PoolingOfflineMixin
from hybridllm.entrypoints.prompt_inputs import PromptType, is_single_prompt, prompt_of
from hybridllm.outputs import RequestOutput
from hybridllm.sampling_params import SamplingParams
from hybridllm.text.chat_template import render_chat

Messages = list[dict[str, Any]]


class OfflineInferenceMixin:
    """generate() and chat(); needs `self.engine` (an LLMEngine for a generative model)."""

    engine: LLMEngine | PoolingEngine
    _counter: itertools.count

    def _generate_engine(self, method: str) -> LLMEngine:
        engine = self.engine
        if not isinstance(engine, LLMEngine):
            raise ValueError(
                f"LLM.{method}() needs a generative model; {engine.config.served_model_name} "
                f"is an embedding model (task {engine.config.task!r}): use LLM.embed() or "
                "LLM.encode()."
            )
        return engine

    def generate(
        self,
        prompts: PromptType | Sequence[PromptType],
        sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
        use_tqdm: bool = True,
        priority: list[int] | None = None,
    ) -> list[RequestOutput]:
        """Run every prompt to completion; outputs come back in input order. As vLLM, a
        "Processed prompts" progress bar shows on a terminal unless `use_tqdm=False`, and
        `priority` (one per prompt; needs --scheduling-policy priority) orders the queue."""
        engine = self._generate_engine("generate")
        batch = [prompts] if is_single_prompt(prompts) else list(prompts)
        if sampling_params is None or isinstance(sampling_params, SamplingParams):
            params = [sampling_params or SamplingParams()] * len(batch)
        else:
            params = list(sampling_params)
            if len(params) != len(batch):
                raise ValueError(
                    f"got {len(params)} sampling_params for {len(batch)} prompts; "
                    "give one, or one per prompt."
                )
        if priority is not None and len(priority) != len(batch):
            raise ValueError(f"got {len(priority)} priorities for {len(batch)} prompts; give "
                             "one per prompt.")
        ids: list[str] = []
        try:
            for i, (prompt, p) in enumerate(zip(batch, params)):
                rid = str(next(self._counter))
                engine.add_request(rid, prompt_of(prompt), p,
                                   priority=priority[i] if priority else 0)
                ids.append(rid)
        except BaseException:
            # One refused request (a grammar that does not compile, say) refuses the call:
            # the ones already added are dropped, not left to run with a later call.
            engine.abort_request(ids)
            self._run(ids, use_tqdm=False)  # their final (aborted) outputs: nothing left
            raise
        return self._run(ids, use_tqdm)

    def chat(
        self,
        messages: Messages | list[Messages],
        sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
        add_generation_prompt: bool = True,
        continue_final_message: bool = False,
        chat_template: str | None = None,
        tools: list[dict[str, Any]] | None = None,
        use_tqdm: bool = True,
    ) -> list[RequestOutput]:
        """Apply the chat template (the model's, or `chat_template`) and generate."""
        engine = self._generate_engine("chat")
        conversations = [messages] if messages and isinstance(messages[0], dict) else messages
        info = engine.tokenizer_info
        template = chat_template or info.chat_template
        if not template:
            raise ValueError("the model has no chat template; pass chat_template=")
        prompts: list[PromptType] = []
        for conversation in conversations:
            text = render_chat(
                template, conversation, add_generation_prompt=add_generation_prompt,
                continue_final_message=continue_final_message, tools=tools,
                bos_token=info.bos_token, eos_token=info.eos_token,
            )
            # The template already carries the special tokens.
            prompts.append(engine.tokenizer.encode(text, add_special_tokens=False).ids)
        outputs = self.generate(prompts, sampling_params, use_tqdm)
        return outputs

    def _run(self, request_ids: list[str], use_tqdm: bool) -> list[RequestOutput]:
        return run_to_completion(self._generate_engine("generate"), request_ids, use_tqdm)


class LLM(PoolingOfflineMixin, BeamSearchOfflineMixin, OfflineInferenceMixin):
    """An engine in this process: `LLM(model=...)`, then generate(), chat() or beam_search()
    for a generative model, embed() or encode() for an embedding model (models.task decides
    which it is)."""

    def __init__(self, model: str | None = None, **kwargs: Any) -> None:
        self.engine_args = EngineArgs(model=model, **kwargs)
        config = self.engine_args.resolve()
        self.engine: LLMEngine | PoolingEngine = (
            PoolingEngine(config) if config.task == "embed" else LLMEngine(config)
        )
        self._counter = itertools.count()

    def get_tokenizer(self) -> Any:
        return self.engine.tokenizer
