"""Runs one scheduled step: flat inputs from the schedule, forward, logits, sampling.

On CUDA: fused Triton layer ops, the KV cache sized after a profiling pass, pure-decode steps
replayed from CUDA graphs (executor/cuda_graph.py), and the Triton sampler. On CPU: the torch
layers, torch attention and the torch sampler, exactly as before.

Under tensor parallelism every rank builds a runner over its shard of the model; rank 0's is
the engine's: it prepares each step, broadcasts the step's host inputs and the logit rows it
will ask for (StepMessage), and samples. The other ranks run `follow()`: the same forward pass
and LM-head gathers on what rank 0 sent, until it sends None.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from hybridllm.attention import get_attention_backend
from hybridllm.config import EngineConfig
from hybridllm.distributed.parallel_state import (
    SINGLE,
    TensorParallelGroup,
    destroy_group,
    init_group,
)
from hybridllm.executor.beam_candidates import beam_candidates, copy_blocks
from hybridllm.executor.cpu_env import keep_freed_memory
from hybridllm.executor.cuda_graph import DecodeGraphs, capture_sizes
from hybridllm.executor.input_batch import InputBatch, PreparedBatch
from hybridllm.executor.kv_cache import (
    allocate_kv_caches,
    needs_profile,
    num_kv_blocks,
    plan_window_pool,
    profile_peak_bytes,
)
from hybridllm.models import cpu_linear
from hybridllm.models.fused_ops import select_layer_ops
from hybridllm.models.loader import load_model
from hybridllm.outputs import LogprobsDict
from hybridllm.sequence import Sequence
from hybridllm.spec_decode.verify import draft_rows, emitted_rows
from hybridllm.step_types import (
    AttentionMetadata,
    SamplerOutput,
    SchedulerOutput,
    StepResult,
    TokenSampler,
    WindowPool,
    top_logprobs,
)
from hybridllm.structured.masks import GrammarMasks

_NUMPY_DTYPES = {torch.int64: np.dtype(np.int64), torch.int32: np.dtype(np.int32)}


@dataclass
class ModelInputs:
    input_ids: torch.Tensor
    positions: torch.Tensor
    meta: AttentionMetadata
    sample_rows: list[int]  # flat row of each sampling sequence's last token
    sample_seqs: list[Sequence]
    # Prompt-logprob work: (sequence, first prompt position, flat rows) per chunk.
    prompt_lp: list[tuple[Sequence, int, list[int]]]
    host: PreparedBatch  # the host arrays these came from (what other TP ranks are sent)


@dataclass
class StepMessage:
    """What rank 0 sends the other tensor-parallel ranks each step."""

    batch: PreparedBatch  # without sample_seqs / prompt_lp (only rank 0 holds sequences)
    logit_rows: list[list[int] | None]  # each LM-head call's rows (None: every row)
    blocks_to_copy: list[tuple[int, int]]


class ModelRunner:
    def __init__(
        self, config: EngineConfig, sampler: TokenSampler | None, rank: int = 0
    ) -> None:
        """`sampler` picks each sampling row's token (sampling/: the engine chooses it); the
        tensor-parallel ranks other than 0 have none."""
        self._init_host(config, sampler)
        if self.device.type == "cpu":
            keep_freed_memory()
        if config.parallel.tensor_parallel_size > 1:
            self.tp = init_group(rank, config.parallel, self.device)
        torch.manual_seed(config.args.seed)
        load_format = "dummy" if config.args.load_format == "dummy" else "safetensors"
        self.model = load_model(
            config.model_path, config.model, config.dtype, self.device,
            config.max_model_len, load_format, self.tp,
        )
        if (
            self.device.type == "cpu"
            and cpu_linear.available(config.dtype)
            and not os.environ.get("HYBRIDLLM_DISABLE_CPU_KERNELS")
        ):
            self.model.pack_for_cpu()
        self.backend = get_attention_backend(self.device, config.args.attention_backend)
        self.model.set_layer_ops(select_layer_ops(self.device, self.backend.name))
        peak = None
        if needs_profile(config):
            peak = profile_peak_bytes(config, self.model, self.backend)
        # Every rank's cache must hold the same blocks (CUDA profiling may differ by rank).
        self.num_blocks = self.tp.min_over_ranks(num_kv_blocks(config, peak))
        if not self._graphs_wanted():  # a decode graph captures one pool's block tables
            self.num_blocks, self.window_pool = plan_window_pool(config, self.num_blocks)
            self.input_batch.windowed = self.window_pool is not None
        self.kv_caches = allocate_kv_caches(config, self.num_blocks, self.window_pool)
        self.graphs = self._capture_graphs()

    def _init_host(self, config: EngineConfig, sampler: TokenSampler | None) -> None:
        """The host-side state, apart from the model (FakeForwardRunner shares it)."""
        self.config = config
        self.device = config.device
        self.block_size = config.args.block_size
        self.sampler = sampler
        self.grammar_masks = GrammarMasks(config.model.vocab_size, self.device.type == "cuda")
        self.tp: TensorParallelGroup = SINGLE
        self.window_pool: WindowPool | None = None
        self.input_batch = InputBatch(
            config.scheduler.max_num_seqs, -(-config.max_model_len // self.block_size),
            self.block_size,
        )

    def _graphs_wanted(self) -> bool:
        """Decode graphs on CUDA with the Triton backend (the torch backend plans from host
        values each step, so it cannot be replayed), unless --enforce-eager. Not under tensor
        parallelism: its all-reduces are not captured."""
        return not (
            self.device.type != "cuda"
            or self.backend.name != "triton"
            or self.config.args.enforce_eager
            or self.tp.world_size > 1
        )

    def _capture_graphs(self) -> DecodeGraphs | None:
        config = self.config
        if not self._graphs_wanted():
            return None
        graphs = DecodeGraphs(
            self.model, self.backend, self.kv_caches,
            capture_sizes(config.scheduler.max_num_seqs),
            max_blocks_per_seq=-(-config.max_model_len // self.block_size),
            max_seqlen_k=config.max_model_len,
        )
        graphs.capture()
        return graphs

    def _to_device(self, host: np.ndarray | list[int], dtype: torch.dtype) -> torch.Tensor:
        # The step's arrays are made fresh for it (never written again), so sharing their
        # memory is safe; from_numpy costs a third of as_tensor.
        if isinstance(host, np.ndarray) and host.dtype == _NUMPY_DTYPES[dtype]:
            tensor = torch.from_numpy(host)
        else:
            tensor = torch.as_tensor(host, dtype=dtype)
        if self.device.type == "cuda":
            # Pinned, so the copy is asynchronous and the host goes on preparing.
            return tensor.pin_memory().to(self.device, non_blocking=True)
        return tensor

    def prepare(self, sched: SchedulerOutput) -> ModelInputs:
        return self._device_inputs(self.input_batch.prepare(sched))

    def _device_inputs(self, host: PreparedBatch) -> ModelInputs:
        meta = AttentionMetadata(
            slot_mapping=self._to_device(host.slot_mapping, torch.int64),
            cu_seqlens_q=self._to_device(host.cu_seqlens_q, torch.int32),
            seq_lens=self._to_device(host.seq_lens, torch.int32),
            block_tables=self._to_device(host.block_tables, torch.int32),
            max_seqlen_q=host.max_query_len,
            max_seqlen_k=host.max_seq_len,
            query_lens_host=host.query_lens,
            seq_lens_host=host.seq_lens_host,
        )
        if host.window_slot_mapping is not None and host.window_block_tables is not None:
            meta.windowed = dataclasses.replace(
                meta, slot_mapping=self._to_device(host.window_slot_mapping, torch.int64),
                block_tables=self._to_device(host.window_block_tables, torch.int32),
                backend_state={},
            )
        return ModelInputs(
            input_ids=self._to_device(host.input_ids, torch.int64),
            positions=self._to_device(host.positions, torch.int64),
            meta=meta,
            sample_rows=host.sample_rows,
            sample_seqs=host.sample_seqs,
            prompt_lp=host.prompt_lp,
            host=host,
        )

    @torch.inference_mode()
    def execute(
        self, sched: SchedulerOutput, while_running: Callable[[], None] | None = None
    ) -> StepResult:
        """The forward pass and sampling. `while_running` is called once: on CUDA after the
        forward pass is queued (it runs while the GPU computes), on CPU before it."""
        inputs = self.prepare(sched)
        host = inputs.host
        # The LM-head calls of this step: the sampling rows first, then each prompt-logprob
        # chunk's rows.
        num_rows = len(host.input_ids)
        sample_group: list[list[int] | None] = (
            [None] if len(host.sample_rows) == num_rows
            else [host.sample_rows] if host.sample_rows else []
        )
        logit_rows = sample_group + [rows for _, _, rows in host.prompt_lp]
        keep, kept_logit_rows = self._keep(logit_rows, num_rows)
        if self.tp.world_size > 1:
            bare = dataclasses.replace(host, sample_seqs=[], prompt_lp=[])
            self.tp.broadcast(StepMessage(bare, logit_rows, sched.blocks_to_copy))
        if sched.blocks_to_copy:
            copy_blocks(self.kv_caches, sched.blocks_to_copy)
        # A speculative step samples a row per draft position: each row its sequence's view.
        speculative = sched.num_draft_tokens > 0
        row_seqs = draft_rows(inputs.sample_seqs) if speculative else inputs.sample_seqs
        # The constrained rows' bitmask is filled on a thread during the forward pass.
        pending_bitmask = self.grammar_masks.start(row_seqs)
        overlap = self.device.type == "cuda"
        if while_running is not None and not overlap:
            while_running()
        hidden = self._forward(inputs, keep)
        if while_running is not None and overlap:
            while_running()
        logits_list = self._logits(hidden, kept_logit_rows)
        prompt_logprobs = self._prompt_logprobs(logits_list[len(sample_group):], inputs)
        if sample_group:
            logits = logits_list[0]
            bitmask = pending_bitmask.wait() if pending_bitmask is not None else None
            sampled = self.sampler(logits, row_seqs, bitmask)
        else:
            sampled = SamplerOutput([], [], [])
        result = StepResult(sampled, inputs.sample_seqs, prompt_logprobs)
        if speculative:
            result.spec = emitted_rows(inputs.sample_seqs, sampled.token_ids)
        if sched.has_beams and inputs.sample_rows:
            if speculative:  # one row per sequence, as beam_candidates indexes them
                last = [first + len(s.spec_token_ids)
                        for (first, _), s in zip(result.spec or [], inputs.sample_seqs)]
                logits = logits[torch.tensor(last, device=logits.device)]
            result.beam_candidates = beam_candidates(
                logits, inputs.sample_seqs, self.config.model.eos_token_ids
            )
        return result

    @torch.inference_mode()
    def follow(self) -> None:
        """A tensor-parallel rank other than 0: run rank 0's steps until it sends None."""
        while True:
            msg = self.tp.broadcast(None)
            if msg is None:
                return
            assert isinstance(msg, StepMessage)
            if msg.blocks_to_copy:
                copy_blocks(self.kv_caches, msg.blocks_to_copy)
            keep, kept_logit_rows = self._keep(msg.logit_rows, len(msg.batch.input_ids))
            hidden = self._forward(self._device_inputs(msg.batch), keep)
            self._logits(hidden, kept_logit_rows)

    def shutdown(self) -> None:
        """Rank 0: let the other tensor-parallel ranks leave their loop."""
        if self.tp.world_size > 1 and self.tp.rank == 0:
            self.tp.broadcast(None)
            self.tp = SINGLE
            destroy_group()  # another engine in this process may form a group of its own

    def _keep(
        self, logit_rows: list[list[int] | None], num_rows: int
    ) -> tuple[torch.Tensor | None, list[list[int] | None]]:
        rows, kept_logit_rows = kept_rows(logit_rows, num_rows)
        return (None if rows is None else self._to_device(rows, torch.int64)), kept_logit_rows

    def _forward(self, inputs: ModelInputs, keep: torch.Tensor | None = None) -> torch.Tensor:
        if keep is None and self.graphs is not None and self.graphs.can_run(inputs.meta):
            return self.graphs.run(inputs.input_ids, inputs.positions, inputs.meta)
        return self.model(
            inputs.input_ids, inputs.positions, self.kv_caches, inputs.meta, self.backend, keep
        )

    def _logits(
        self, hidden: torch.Tensor, logit_rows: list[list[int] | None]
    ) -> list[torch.Tensor]:
        out = []
        for rows in logit_rows:
            if rows is not None:
                hidden_rows = hidden.index_select(0, self._to_device(rows, torch.int64))
            out.append(self.model.compute_logits(hidden if rows is None else hidden_rows))
        return out

    def _prompt_logprobs(
        self, logits_list: list[torch.Tensor], inputs: ModelInputs
    ) -> dict[int, tuple[int, list[LogprobsDict]]]:
        out: dict[int, tuple[int, list[LogprobsDict]]] = {}
        for (seq, start, rows), logits in zip(inputs.prompt_lp, logits_list):
            logprobs = logits.log_softmax(-1)
            targets = torch.tensor(
                seq.token_ids[start + 1 : start + 1 + len(rows)], device=self.device
            )
            k = seq.params.prompt_logprobs or 0
            out[seq.seq_id] = (start + 1, top_logprobs(logprobs, targets, [k] * len(rows)))
        return out


def kept_rows(
    logit_rows: list[list[int] | None], num_rows: int
) -> tuple[list[int] | None, list[list[int] | None]]:
    """The rows of a step the LM head reads (None: every row), for the model to carry through
    its last layer's MLP alone, and each LM-head call's rows among them. A prompt chunk's
    other rows only fill the cache, which the last layer's attention has done by then: this
    saves that layer's MLP for them (2.5 % of a prefill's work in the default model)."""
    if any(rows is None for rows in logit_rows):
        return None, logit_rows
    wanted = sorted({r for rows in logit_rows if rows is not None for r in rows})
    if len(wanted) == num_rows:
        return None, logit_rows
    # No row read (every chunk short of its prompt's end): one row keeps the shapes whole.
    wanted = wanted or [num_rows - 1]
    position = {row: i for i, row in enumerate(wanted)}
    every = list(range(len(wanted)))
    kept: list[list[int] | None] = []
    for rows in logit_rows:
        assert rows is not None
        at = [position[r] for r in rows]
        kept.append(None if at == every else at)
    return wanted, kept
