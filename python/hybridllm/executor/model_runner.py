"""Runs one scheduled step: flat inputs from the schedule, forward, logits, sampling.

On CUDA: fused Triton layer ops, the KV cache sized after a profiling pass, pure-decode steps
replayed from CUDA graphs (executor/cuda_graph.py), and the Triton sampler. On CPU: the torch
layers, torch attention and the torch sampler, exactly as before.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from hybridllm.attention import get_attention_backend
from hybridllm.config import EngineConfig
from hybridllm.executor.beam_candidates import beam_candidates, copy_blocks
from hybridllm.executor.cpu_env import keep_freed_memory
from hybridllm.executor.cuda_graph import DecodeGraphs, capture_sizes
from hybridllm.executor.input_batch import InputBatch
from hybridllm.executor.kv_cache import (
    allocate_kv_caches,
    needs_profile,
    num_kv_blocks,
    profile_peak_bytes,
)
from hybridllm.models import cpu_linear
from hybridllm.models.fused_ops import select_layer_ops
from hybridllm.models.loader import load_model
from hybridllm.outputs import LogprobsDict
from hybridllm.sequence import Sequence
from hybridllm.step_types import (
    AttentionMetadata,
    SamplerOutput,
    SchedulerOutput,
    StepResult,
    TokenSampler,
    top_logprobs,
)


@dataclass
class ModelInputs:
    input_ids: torch.Tensor
    positions: torch.Tensor
    meta: AttentionMetadata
    sample_rows: list[int]  # flat row of each sampling sequence's last token
    sample_seqs: list[Sequence]
    # Prompt-logprob work: (sequence, first prompt position, flat rows) per chunk.
    prompt_lp: list[tuple[Sequence, int, list[int]]]


class ModelRunner:
    def __init__(self, config: EngineConfig, sampler: TokenSampler) -> None:
        """`sampler` picks each sampling row's token (sampling/: the engine chooses it)."""
        self._init_host(config, sampler)
        if self.device.type == "cpu":
            keep_freed_memory()
        torch.manual_seed(config.args.seed)
        load_format = "dummy" if config.args.load_format == "dummy" else "safetensors"
        self.model = load_model(
            config.model_path, config.model, config.dtype, self.device,
            config.max_model_len, load_format,
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
        self.num_blocks = num_kv_blocks(config, peak)
        self.kv_caches = allocate_kv_caches(config, self.num_blocks)
        self.graphs = self._capture_graphs()

    def _init_host(self, config: EngineConfig, sampler: TokenSampler) -> None:
        """The host-side state, apart from the model (FakeForwardRunner shares it)."""
        self.config = config
        self.device = config.device
        self.block_size = config.args.block_size
        self.sampler = sampler
        self.input_batch = InputBatch(
            config.scheduler.max_num_seqs, -(-config.max_model_len // self.block_size),
            self.block_size,
        )

    def _capture_graphs(self) -> DecodeGraphs | None:
        """Decode graphs on CUDA with the Triton backend (the torch backend plans from host
        values each step, so it cannot be replayed), unless --enforce-eager."""
        config = self.config
        if (
            self.device.type != "cuda"
            or self.backend.name != "triton"
            or config.args.enforce_eager
        ):
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
        tensor = torch.as_tensor(host, dtype=dtype)
        if self.device.type == "cuda":
            # Pinned, so the copy is asynchronous and the host goes on preparing.
            return tensor.pin_memory().to(self.device, non_blocking=True)
        return tensor

    def prepare(self, sched: SchedulerOutput) -> ModelInputs:
        host = self.input_batch.prepare(sched)
        meta = AttentionMetadata(
            slot_mapping=self._to_device(host.slot_mapping, torch.int64),
            cu_seqlens_q=self._to_device(host.cu_seqlens_q, torch.int32),
            seq_lens=self._to_device(host.seq_lens, torch.int32),
            block_tables=self._to_device(host.block_tables, torch.int32),
            max_seqlen_q=max(host.query_lens),
            max_seqlen_k=max(host.seq_lens_host),
            query_lens_host=host.query_lens,
            seq_lens_host=host.seq_lens_host,
        )
        return ModelInputs(
            input_ids=self._to_device(host.input_ids, torch.int64),
            positions=self._to_device(host.positions, torch.int64),
            meta=meta,
            sample_rows=host.sample_rows,
            sample_seqs=host.sample_seqs,
            prompt_lp=host.prompt_lp,
        )

    @torch.inference_mode()
    def execute(
        self, sched: SchedulerOutput, while_running: Callable[[], None] | None = None
    ) -> StepResult:
        """The forward pass and sampling. `while_running` is called once: on CUDA after the
        forward pass is queued (it runs while the GPU computes), on CPU before it."""
        inputs = self.prepare(sched)
        if sched.blocks_to_copy:
            copy_blocks(self.kv_caches, sched.blocks_to_copy)
        overlap = self.device.type == "cuda"
        if while_running is not None and not overlap:
            while_running()
        if self.graphs is not None and self.graphs.can_run(inputs.meta):
            hidden = self.graphs.run(inputs.input_ids, inputs.positions, inputs.meta)
        else:
            hidden = self.model(
                inputs.input_ids, inputs.positions, self.kv_caches, inputs.meta, self.backend
            )
        if while_running is not None and overlap:
            while_running()
        prompt_logprobs = self._prompt_logprobs(hidden, inputs)
        if len(inputs.sample_rows) == hidden.shape[0]:
            # Every row samples (all decode, or one-token chunks): rows 0..T-1 in order.
            logits = self.model.compute_logits(hidden)
            sampled = self.sampler(logits, inputs.sample_seqs)
        elif inputs.sample_rows:
            rows = self._to_device(inputs.sample_rows, torch.int64)
            logits = self.model.compute_logits(hidden.index_select(0, rows))
            sampled = self.sampler(logits, inputs.sample_seqs)
        else:
            sampled = SamplerOutput([], [], [])
        result = StepResult(sampled, inputs.sample_seqs, prompt_logprobs)
        if sched.has_beams and inputs.sample_rows:
            result.beam_candidates = beam_candidates(
                logits, inputs.sample_seqs, self.config.model.eos_token_ids
            )
        return result

    def _prompt_logprobs(
        self, hidden: torch.Tensor, inputs: ModelInputs
    ) -> dict[int, tuple[int, list[LogprobsDict]]]:
        out: dict[int, tuple[int, list[LogprobsDict]]] = {}
        for seq, start, rows in inputs.prompt_lp:
            idx = torch.tensor(rows, device=self.device)
            logprobs = self.model.compute_logits(hidden.index_select(0, idx)).log_softmax(-1)
            targets = torch.tensor(
                seq.token_ids[start + 1 : start + 1 + len(rows)], device=self.device
            )
            k = seq.params.prompt_logprobs or 0
            out[seq.seq_id] = (start + 1, top_logprobs(logprobs, targets, [k] * len(rows)))
        return out
