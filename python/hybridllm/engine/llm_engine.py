"""LLMEngine: requests in, one scheduled forward pass per step(), RequestOutputs out."""

from __future__ import annotations

import atexit
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from hybridllm.config import EngineArgs, EngineConfig
from hybridllm.core.kv_cache_manager import KVCacheManager
from hybridllm.core.scheduler import Scheduler
from hybridllm.engine.beam_groups import BeamGroups
from hybridllm.engine.output_processor import OutputProcessor
from hybridllm.executor.mock_runner import MockModelRunner
from hybridllm.executor.model_runner import ModelRunner
from hybridllm.executor.tp_worker import start_ranks, threads_per_rank, with_rendezvous
from hybridllm.outputs import RequestOutput
from hybridllm.sampling import build_sampler
from hybridllm.sampling_params import BeamSearchParams, ParamError, SamplingParams
from hybridllm.sequence import Request, Sequence, SequenceStatus, make_generator
from hybridllm.spec_decode.ngram_proposer import NgramProposer
from hybridllm.step_types import SamplerOutput, SchedulerOutput, StepResult, TokenSampler
from hybridllm.structured.grammar import GrammarCompiler
from hybridllm.text.bad_words import bad_words_token_ids
from hybridllm.text.tokenizer import load_tokenizer


@dataclass
class EngineStats:
    prompt_tokens_total: int = 0
    generation_tokens_total: int = 0
    requests_finished_total: int = 0
    # Speculative decoding, vLLM's counters: verify steps of a sequence with drafts, the
    # draft tokens verified, those accepted, and accepted by draft position (index j: the
    # (j + 1)-th draft of a step).
    spec_decode_num_drafts: int = 0
    spec_decode_num_draft_tokens: int = 0
    spec_decode_num_accepted_tokens: int = 0
    spec_decode_num_accepted_tokens_per_pos: list[int] = field(default_factory=list)


def _build_runner(config: EngineConfig, sampler: TokenSampler) -> ModelRunner:
    """The engine's runner; under tensor parallelism, rank 0's, after this node's other ranks
    were started (they join the group as the runner does)."""
    if config.parallel.tensor_parallel_size == 1:
        return ModelRunner(config, sampler)
    config = with_rendezvous(config)
    torch.set_num_threads(threads_per_rank(config))
    start_ranks(config, config.parallel.node_ranks()[1:])
    runner = ModelRunner(config, sampler)
    # An offline script may end without shutting the engine down: release the ranks then.
    ref = weakref.ref(runner)
    atexit.register(lambda: (r := ref()) is not None and r.shutdown())
    return runner


class LLMEngine:
    def __init__(self, config: EngineConfig, detokenize: bool = True) -> None:
        if config.task != "generate":
            raise ValueError(f"{config.model_path} is an embedding model (task {config.task!r}): "
                             "run it with PoolingEngine.")
        self.config = config
        self.tokenizer, self.tokenizer_info = load_tokenizer(config.model_path)
        if config.args.mock_engine:
            self.runner: ModelRunner | MockModelRunner = MockModelRunner(config)
        else:
            sampler = build_sampler(config.model, config.args.seed, config.device)
            self.runner = _build_runner(config, sampler)
        self.stats = EngineStats()
        self.kv = KVCacheManager(
            self.runner.num_blocks, config.args.block_size, config.args.enable_prefix_caching,
            self.runner.window_pool,
        )
        spec = config.speculative
        proposer = None if spec is None else NgramProposer(
            spec.num_speculative_tokens, spec.prompt_lookup_min, spec.prompt_lookup_max)
        self.scheduler = Scheduler(config.scheduler, self.kv, proposer)
        if spec is not None:
            self.stats.spec_decode_num_accepted_tokens_per_pos = (
                [0] * spec.num_speculative_tokens)
        self.output_processor = OutputProcessor(self.tokenizer, detokenize)
        self._eos_token_ids = frozenset(config.model.eos_token_ids)
        self.grammars = GrammarCompiler(
            self.tokenizer, config.model.vocab_size, tuple(config.model.eos_token_ids)
        )
        self.beams = BeamGroups(self.scheduler, self._eos_token_ids)
        self.requests: dict[str, Request] = {}
        self._aborted: list[Request] = []

    @classmethod
    def from_engine_args(cls, args: EngineArgs, detokenize: bool = True) -> LLMEngine:
        return cls(args.resolve(), detokenize=detokenize)

    def shutdown(self) -> None:
        """Release the other tensor-parallel ranks (nothing to do without them)."""
        if isinstance(self.runner, ModelRunner):
            self.runner.shutdown()

    @property
    def max_model_len(self) -> int:
        return self.config.max_model_len

    def validate_prompt(self, prompt_token_ids: list[int]) -> None:
        vocab = self.config.model.vocab_size
        if not prompt_token_ids:
            raise ValueError("The prompt must contain at least one token.")
        bad = next((t for t in prompt_token_ids if not 0 <= t < vocab), None)
        if bad is not None:
            raise ValueError(f"prompt_token_ids: token id {bad} is out of vocabulary [0, {vocab}).")
        if len(prompt_token_ids) >= self.max_model_len:
            raise ValueError(
                f"The prompt (length {len(prompt_token_ids)}) is longer than the maximum model "
                f"length of {self.max_model_len} minus one token to generate."
            )

    def add_request(
        self,
        request_id: str,
        prompt: str | list[int],
        params: SamplingParams | BeamSearchParams | None = None,
        arrival_time: float | None = None,
        priority: int = 0,
    ) -> None:
        """Queue a request: n samples (SamplingParams) or one beam group (BeamSearchParams).
        `priority` as vLLM's: with --scheduling-policy priority, lower is scheduled sooner."""
        if request_id in self.requests:
            raise ValueError(f"request id {request_id!r} is already in use.")
        if priority and self.config.scheduler.policy != "priority":
            raise ParamError("priority", f"Got priority {priority} but Priority scheduling is "
                             "not enabled (start the server with --scheduling-policy priority).")
        beam = params if isinstance(params, BeamSearchParams) else None
        params = BeamGroups.sampling_params(beam) if beam else params or SamplingParams()
        if isinstance(prompt, str):
            text, ids = prompt, self.tokenizer.encode(prompt, add_special_tokens=True).ids
        else:
            text, ids = None, list(prompt)
        self.validate_prompt(ids)
        vocab = self.config.model.vocab_size
        bad = next((t for t in params.logit_bias or {} if not 0 <= t < vocab), None)
        if bad is not None:
            raise ParamError(
                "logit_bias", f"token_id {bad} in logit_bias is out of vocabulary (size {vocab}).")
        bad = next((t for t in params.allowed_token_ids or [] if not 0 <= t < vocab), None)
        if bad is not None:
            raise ParamError("allowed_token_ids", f"allowed_token_ids: token id {bad} is out "
                             f"of vocabulary (size {vocab}).")
        # Compiled before anything is queued: a grammar that does not compile refuses this
        # request alone (ValueError: INVALID_ARGUMENT over gRPC).
        grammar = params.grammar
        matchers = self.grammars.matchers(grammar, params.n) if grammar is not None else None
        room = self.max_model_len - len(ids)
        request = Request(
            request_id=request_id,
            prompt=text,
            prompt_token_ids=ids,
            params=params,
            max_tokens=min(params.max_tokens or room, room),
            arrival_time=arrival_time or time.monotonic(),
            priority=priority,
            bad_words_ids=bad_words_token_ids(self.tokenizer, params.bad_words or []),
        )
        if params.prompt_logprobs is not None:
            request.prompt_logprobs = [None]
        if beam is not None:
            self.scheduler.add(self.beams.add(request, beam))
        stop_ids = frozenset(params.stop_token_ids)
        if not params.ignore_eos:
            stop_ids |= self._eos_token_ids
        for i in range(params.n if beam is None else 0):
            seq = Sequence(request, i, make_generator(params.seed, i))
            seq.stop_ids = stop_ids
            if matchers is not None:
                seq.matcher = matchers[i]
            # Not under a grammar: each draft token would have to pass the matcher first
            # (docs/architecture.md). Beams (above) never speculate either.
            seq.spec_enabled = matchers is None
            request.seqs.append(seq)
            self.scheduler.add(seq)
        self.requests[request_id] = request
        self.stats.prompt_tokens_total += len(ids)

    def abort_request(self, request_ids: str | list[str]) -> None:
        """Finish the requests now and free their KV blocks; their final output comes next step."""
        for rid in [request_ids] if isinstance(request_ids, str) else request_ids:
            request = self.requests.get(rid)
            if request is None or request.finished:
                continue
            for seq in request.seqs:
                self.scheduler.finish(seq, "abort")
            if request.beam_width:
                self.beams.abort(request)
            self._aborted.append(request)

    def has_unfinished_requests(self) -> bool:
        return bool(self.requests)

    def step(self, while_running: Callable[[], None] | None = None) -> list[RequestOutput]:
        """One scheduled forward pass. `while_running` runs once the batch is scheduled, while
        the forward pass is in flight where the device allows (AsyncLLMEngine hands over the
        previous step's outputs there), else just before it; not at all when nothing ran."""
        return self.make_outputs(self.step_requests(while_running))

    def make_outputs(self, requests: list[Request]) -> list[RequestOutput]:
        """The outputs of requests a step touched; valid until the next step's forward pass
        ends (AsyncLLMEngine builds them during it)."""
        return self.output_processor.make_outputs(requests)

    def step_requests(self, while_running: Callable[[], None] | None = None) -> list[Request]:
        """step() without building its outputs: the requests it touched."""
        touched: dict[str, Request] = {r.request_id: r for r in self._aborted}
        # Aborted and beam requests are checked here; a plain request's row marks its first
        # token and its end itself (checking every request every step cost a loop).
        others, self._aborted = self._aborted, []
        ended: list[Request] = []
        sched = self.scheduler.schedule()
        if sched.seqs:
            sched.has_beams = bool(self.beams.groups)
            result = self.runner.execute(sched, while_running)
            others += self._apply_step(sched, result, touched, ended)
        for request in others:
            if not request.reported_first:
                request.reported_first = True
                request.first_token_time = time.monotonic()
            if request.num_finished_seqs == len(request.seqs):  # request.finished
                ended.append(request)
        for request in ended:
            self.requests.pop(request.request_id, None)
            self.stats.requests_finished_total += 1
        return list(touched.values())

    def _apply_step(self, sched: SchedulerOutput, result: StepResult,
                    touched: dict[str, Request], ended: list[Request]) -> list[Request]:
        """The scheduled tokens are computed: count them and publish the KV blocks they
        filled; each chunk that reached its sequence's end gives the sequence its sampled
        token (the runner's sample rows are those sequences, in schedule order), then the
        stops. Requests whose last sequence finished go to `ended`. One loop over the batch,
        as this runs for every running sequence every step; returns the beam requests,
        advanced a step."""
        kv = self.kv
        bs, caching = kv.block_size, kv.enable_prefix_caching
        if result.prompt_logprobs:
            for seq in sched.seqs:
                self._record_prompt_logprobs(seq, result)
        beam_requests: dict[str, Request] = {}
        num_beam_rows = 0
        sampled = result.sampled
        token_ids = sampled.token_ids
        spec = result.spec
        num_spec_rows = 0  # sequences with drafts: _apply_drafts counts their tokens
        row = -1
        for seq, num_new in zip(sched.seqs, sched.num_new_tokens):
            if spec is not None and seq.spec_token_ids:
                row += 1
                first, n = spec[row]
                num_spec_rows += 1
                if self._apply_drafts(seq, token_ids[first : first + n], first, sampled):
                    ended.append(seq.request)
                touched[seq.request.request_id] = seq.request
                continue
            computed = seq.num_computed_tokens = seq.num_computed_tokens + num_new
            if caching and computed // bs > seq.num_published_blocks:
                kv.cache_computed_blocks(seq)
            if computed < len(seq.token_ids):
                continue  # a prompt chunk short of the end: no token yet
            row += 1
            request = seq.request
            if seq.beam_topk:
                self.beams.record(seq, result.beam_candidates[row])
                beam_requests[request.request_id] = request
                num_beam_rows += 1
                continue
            touched[request.request_id] = request
            if not request.reported_first:
                request.reported_first = True
                request.first_token_time = time.monotonic()
            r = row if spec is None else spec[row][0]
            if not self._append_token(seq, token_ids[r], sampled, r):
                continue  # still running: most rows
            if request.num_finished_seqs == len(request.seqs):
                ended.append(request)
        if row + 1 != len(result.sample_seqs):
            raise RuntimeError(f"the runner sampled {len(result.sample_seqs)} rows for "
                               f"{row + 1} sequences at their end")
        self.stats.generation_tokens_total += row + 1 - num_beam_rows - num_spec_rows
        for rid, request in beam_requests.items():
            self.beams.advance(request)
            self.stats.generation_tokens_total += len(request.seqs)
            touched[rid] = request
        return list(beam_requests.values())

    def _append_token(self, seq: Sequence, token: int, sampled: SamplerOutput, r: int) -> bool:
        """Appends seq's sampled token (row r of the sampler's output) with its logprobs and
        the stop checks; True if that finished seq."""
        seq.token_ids.append(token)
        if (logprobs := sampled.logprobs[r]) is not None:
            seq.output_logprobs.append(logprobs)
            seq.cumulative_logprob += sampled.sampled_logprobs[r] or 0.0
        finish = self.scheduler.finish
        # A constrained sequence's matcher sees every token first (it may end it).
        by_grammar = seq.matcher is not None and self._grammar_ends(seq, token)
        if not by_grammar and token in seq.stop_ids:  # a stop token id is the stop reason
            finish(seq, "stop", token if token in seq.params.stop_token_ids else None)
        detokenize = self.output_processor.detokenize
        stop_str = self.output_processor.update_text(seq) if detokenize else None
        if seq.status is not SequenceStatus.FINISHED:
            if stop_str is not None:
                finish(seq, "stop", stop_str)
            elif len(seq.token_ids) >= seq.max_num_tokens:
                finish(seq, "length")
                if detokenize:
                    self.output_processor.finish_text(seq)
            else:
                return False
        return True

    def _apply_drafts(self, seq: Sequence, tokens: list[int], first: int,
                      sampled: SamplerOutput) -> bool:
        """A verify step is applied to seq: its accepted drafts and the bonus token (`tokens`,
        sampled rows first...) are appended one by one with the stop checks, a stop cutting
        the rest; the KV of rejected drafts is dropped (their positions are computed again,
        their blocks past the tokens freed). True if that finished the sequence's request."""
        drafts, seq.spec_token_ids = seq.spec_token_ids, []
        stats = self.stats
        accepted = len(tokens) - 1
        stats.spec_decode_num_drafts += 1
        stats.spec_decode_num_draft_tokens += len(drafts)
        stats.spec_decode_num_accepted_tokens += accepted
        per_pos = stats.spec_decode_num_accepted_tokens_per_pos
        for j in range(accepted):
            per_pos[j] += 1
        # KV is computed for the last token and the accepted drafts. Their blocks are
        # published while the tokens are all in place (a stop below may cut some: their KV
        # is still the model's for those tokens), before a finish frees the blocks.
        old_len = len(seq.token_ids)
        seq.num_computed_tokens = old_len + accepted
        if self.kv.enable_prefix_caching:
            seq.token_ids.extend(tokens[:accepted])
            self.kv.cache_computed_blocks(seq)
            del seq.token_ids[old_len:]
        appended = 0
        for i, token in enumerate(tokens):
            appended += 1
            if self._append_token(seq, token, sampled, first + i):
                break
        stats.generation_tokens_total += appended
        request = seq.request
        if not request.reported_first:
            request.reported_first = True
            request.first_token_time = time.monotonic()
        if seq.status is not SequenceStatus.FINISHED:
            self.kv.trim(seq)
            return False
        return request.num_finished_seqs == len(request.seqs)

    def _grammar_ends(self, seq: Sequence, token: int) -> bool:
        """The constrained sequence's matcher takes its token; True if that ended it: an
        EOS the complete grammar accepted (even under ignore_eos), or a token it refuses (a
        matcher error or a dead end: this sequence alone ends, with the error)."""
        matcher = seq.matcher
        # An errored matcher is stopped, and still takes an EOS: ask it.
        if not matcher.consume_token(token) or matcher.is_error():
            reason = matcher.get_error().split("\n<state>")[0]  # not its state dump
            self.scheduler.finish(
                seq, "error", f"structured_outputs: the output left the grammar at token "
                f"{token}: {reason or 'no token could continue it'}")
            return True
        if token in self._eos_token_ids and matcher.is_stopped():
            self.scheduler.finish(seq, "stop")
            return True
        return False

    def _record_prompt_logprobs(self, seq: Sequence, result: StepResult) -> None:
        chunk = result.prompt_logprobs.get(seq.seq_id)
        recorded = seq.request.prompt_logprobs
        if chunk is None or recorded is None:
            return
        first, entries = chunk
        # After a preemption the prompt is recomputed: keep only positions not yet recorded.
        recorded.extend(entries[max(len(recorded) - first, 0) :])
