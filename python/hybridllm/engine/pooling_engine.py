"""PoolingEngine: embedding requests in, one encoder forward pass per step(), pooled vectors out.

The same shape as LLMEngine, so the offline LLM and the async worker drive it the same way:
add_request / abort_request between steps, step() (= make_outputs(step_requests())) returns
the requests the step finished. A pooling request finishes in the step that runs it: whole
inputs are batched under max_num_batched_tokens (core/pooling_scheduler.py), packed without
padding and pooled (executor/pooling_runner.py); no KV cache is kept.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from hybridllm.config import EngineArgs, EngineConfig
from hybridllm.core.pooling_scheduler import PoolingScheduler
from hybridllm.engine.llm_engine import EngineStats
from hybridllm.executor.mock_runner import MockPoolingRunner
from hybridllm.executor.pooling_runner import PoolingRunner
from hybridllm.outputs import PoolingOutput, PoolingRequestOutput
from hybridllm.pooling_params import PoolingParams
from hybridllm.sampling_params import ParamError
from hybridllm.sequence import PoolingRequest
from hybridllm.text.tokenizer import load_tokenizer
from hybridllm.text.truncation import encode_batch_truncated, special_token_ids, truncate_ids


class PoolingEngine:
    task = "embed"

    def __init__(self, config: EngineConfig) -> None:
        if config.task != "embed":
            raise ValueError(f"PoolingEngine needs an embedding model; {config.model_path} "
                             f"is a {config.task!r} model.")
        self.config = config
        self.tokenizer, self.tokenizer_info = load_tokenizer(config.model_path)
        self._special_ids = special_token_ids(self.tokenizer)
        self.runner: PoolingRunner | MockPoolingRunner = (
            MockPoolingRunner(config) if config.args.mock_engine else PoolingRunner(config)
        )
        self.scheduler = PoolingScheduler(config.scheduler)
        self.requests: dict[str, PoolingRequest] = {}
        self.stats = EngineStats()
        # What errors call the input limit: sentence-transformers' name for it where it is that.
        st_limit = config.pooler.max_seq_length
        self._limit_name = "max_seq_length" if st_limit == self.max_model_len else "max_model_len"

    @classmethod
    def from_engine_args(cls, args: EngineArgs) -> PoolingEngine:
        return cls(args.resolve())

    @property
    def max_model_len(self) -> int:
        return self.config.max_model_len

    @property
    def hidden_size(self) -> int:
        return self.runner.hidden_size

    def validate_prompt(self, prompt_token_ids: list[int]) -> None:
        """Token ids the encoder can take as they are (after any truncation)."""
        vocab = self.config.model.vocab_size
        if not prompt_token_ids:
            raise ValueError("prompt_token_ids: the input must contain at least one token.")
        if min(prompt_token_ids) < 0 or max(prompt_token_ids) >= vocab:
            bad = next(t for t in prompt_token_ids if not 0 <= t < vocab)
            raise ValueError(f"prompt_token_ids: token id {bad} is out of vocabulary [0, {vocab}).")
        if len(prompt_token_ids) > self.max_model_len:
            raise ValueError(
                f"The input ({len(prompt_token_ids)} tokens) is longer than the model's maximum "
                f"of {self.max_model_len} tokens ({self._limit_name}); pass truncate_prompt_tokens "
                "to truncate it."
            )

    def truncation_limit(self, params: PoolingParams) -> int | None:
        t = params.truncate_prompt_tokens
        if t is None:
            return None
        if t > self.max_model_len:
            raise ValueError(
                f"truncate_prompt_tokens ({t}) is larger than the model's maximum of "
                f"{self.max_model_len} tokens ({self._limit_name})."
            )
        return self.max_model_len if t == -1 else t

    def prepare_prompts(
        self, prompts: list[str | list[int]], params: list[PoolingParams]
    ) -> list[list[int]]:
        """The token ids to run for each input: tokenized (all strings in one batch call),
        truncated as asked, validated. Raises ValueError naming the field and the limit."""
        limits = [self.truncation_limit(p) for p in params]
        out: list[list[int] | None] = [None] * len(prompts)
        texts: list[int] = []
        for i, prompt in enumerate(prompts):
            if isinstance(prompt, str):
                if not prompt:
                    raise ValueError("prompt: the input must not be an empty string.")
                texts.append(i)
            elif isinstance(prompt, list) and all(
                isinstance(t, int) and not isinstance(t, bool) for t in prompt
            ):
                out[i] = truncate_ids(prompt, limits[i], self._special_ids)
            else:
                raise ValueError("prompt: expected a string or a list of token ids (ints).")
        if texts:
            lower = self.config.pooler.do_lower_case
            encoded = encode_batch_truncated(
                self.tokenizer,
                [prompts[i].lower() if lower else prompts[i] for i in texts],  # type: ignore[union-attr]
                [limits[i] for i in texts],
            )
            for i, ids in zip(texts, encoded):
                out[i] = ids
        for ids in out:
            assert ids is not None
            self.validate_prompt(ids)
        return out  # type: ignore[return-value]

    def add_requests(
        self,
        requests: list[tuple[str, str | list[int], PoolingParams | None]],
        arrival_time: float | None = None,
    ) -> None:
        """(request id, prompt, params) each; all or none: every input is checked before any
        is queued."""
        ids = [rid for rid, _, _ in requests]
        taken = next((r for r in ids if r in self.requests), None)
        if taken is None and len(set(ids)) < len(ids):
            taken = next(r for i, r in enumerate(ids) if r in ids[:i])
        if taken is not None:
            raise ValueError(f"request id {taken!r} is already in use.")
        params = [p or PoolingParams() for _, _, p in requests]
        for p in params:
            if not isinstance(p, PoolingParams):
                raise ValueError(f"an embedding model takes PoolingParams, got {type(p).__name__}")
        token_ids = self.prepare_prompts([prompt for _, prompt, _ in requests], params)
        arrival_time = arrival_time or time.monotonic()
        default_normalize = self.config.pooler.normalize
        queued = []
        for (rid, prompt, _), p, tokens in zip(requests, params, token_ids):
            normalize = default_normalize if p.normalize is None else p.normalize
            text = prompt if isinstance(prompt, str) else None
            request = PoolingRequest(rid, text, tokens, p, normalize, arrival_time)
            queued.append(request)
            self.requests[rid] = request
            self.stats.prompt_tokens_total += len(tokens)
        # One call's inputs arrived together, so their order among themselves is free: longest
        # first (stable), as sentence-transformers sorts, puts equal lengths in the same steps,
        # and attention runs each length as one dense batch (attention/encoder.py).
        for request in sorted(queued, key=lambda r: -r.num_tokens):
            self.scheduler.add(request)

    def add_request(
        self,
        request_id: str,
        prompt: str | list[int],
        params: PoolingParams | None = None,
        arrival_time: float | None = None,
        priority: int = 0,
    ) -> None:
        if priority:  # its steps take every waiting input in order: nothing to rank
            raise ParamError("priority", "priority is not supported for embedding requests.")
        self.add_requests([(request_id, prompt, params)], arrival_time)

    def abort_request(self, request_ids: str | list[str]) -> None:
        """Forget the requests now: they will not run, and no output comes for them."""
        for rid in [request_ids] if isinstance(request_ids, str) else request_ids:
            request = self.requests.pop(rid, None)
            if request is not None:
                self.scheduler.remove(request)

    def has_unfinished_requests(self) -> bool:
        return bool(self.requests)

    def step(
        self, while_running: Callable[[], None] | None = None
    ) -> list[PoolingRequestOutput]:
        """One forward pass over the next batch; the outputs of the requests it finished.
        `while_running` as in LLMEngine.step."""
        return self.make_outputs(self.step_requests(while_running))

    def step_requests(
        self, while_running: Callable[[], None] | None = None
    ) -> list[PoolingRequest]:
        sched = self.scheduler.schedule()
        if not sched.requests:
            return []
        pooled = self.runner.execute(sched, while_running)
        for row, request in enumerate(sched.requests):
            request.pooled = pooled[row]
            self.requests.pop(request.request_id, None)
        self.stats.requests_finished_total += len(sched.requests)
        return sched.requests

    def make_outputs(self, requests: list[PoolingRequest]) -> list[PoolingRequestOutput]:
        return [
            PoolingRequestOutput(r.request_id, PoolingOutput(r.pooled), r.prompt_token_ids, True)
            for r in requests
        ]
