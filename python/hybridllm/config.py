"""Engine configuration: `EngineArgs` (flags spelled as vLLM spells them) and what it becomes."""

from __future__ import annotations

import argparse
import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from hybridllm.distributed.parallel_state import ParallelConfig
from hybridllm.json_config import json_object

_DTYPES = {
    "float32": torch.float32,
    "float": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
    "half": torch.float16,
}
CPU_DEFAULT_KV_CACHE_BYTES = 2 << 30
# vLLM's VLLM_CPU_KVCACHE_SPACE under our prefix: the CPU KV budget in GiB when no
# --kv-cache-memory is given (operators size it per host; the test suite sets a small one).
KV_SPACE_ENV = "HYBRIDLLM_CPU_KVCACHE_SPACE"


def cpu_default_kv_cache_bytes() -> int:
    """The CPU KV budget without --kv-cache-memory: $HYBRIDLLM_CPU_KVCACHE_SPACE GiB, else 2 GiB."""
    raw = os.environ.get(KV_SPACE_ENV, "").strip()
    if not raw:
        return CPU_DEFAULT_KV_CACHE_BYTES
    try:
        gib = float(raw)
    except ValueError:
        gib = -1.0
    if not 0 < gib < float("inf"):
        raise ValueError(f"{KV_SPACE_ENV} must be a positive number of GiB, got {raw!r}")
    return int(gib * (1 << 30))


@dataclass
class SchedulerConfig:
    max_num_seqs: int
    max_num_batched_tokens: int
    max_model_len: int
    enable_chunked_prefill: bool
    # vLLM's --scheduling-policy: "fcfs" (arrival order) or "priority" (Request.priority,
    # lower first, then arrival).
    policy: str = "fcfs"


SPECULATIVE_METHODS = ("ngram",)


@dataclass
class SpeculativeConfig:
    """vLLM's --speculative-config, for the one method served here: "ngram" (prompt lookup).

    Each step, a decoding sequence's last n tokens (n from prompt_lookup_max down to
    prompt_lookup_min) are looked up in its earlier tokens, and the up to
    num_speculative_tokens tokens that followed the most recent match are verified in one
    forward pass. vLLM's defaults: both lookup bounds 5 when neither is given, else the one
    given for both."""

    num_speculative_tokens: int
    method: str = "ngram"
    prompt_lookup_max: int | None = None
    prompt_lookup_min: int | None = None

    def __post_init__(self) -> None:
        if self.method not in SPECULATIVE_METHODS:
            raise ValueError(f"speculative_config.method must be one of "
                             f"{', '.join(map(repr, SPECULATIVE_METHODS))}; got {self.method!r}")
        k = self.num_speculative_tokens
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError("speculative_config.num_speculative_tokens must be an integer of "
                             f"at least 1; got {k!r}")
        if self.prompt_lookup_min is None and self.prompt_lookup_max is None:
            self.prompt_lookup_min = self.prompt_lookup_max = 5
        elif self.prompt_lookup_min is None:
            self.prompt_lookup_min = self.prompt_lookup_max
        elif self.prompt_lookup_max is None:
            self.prompt_lookup_max = self.prompt_lookup_min
        for name in ("prompt_lookup_min", "prompt_lookup_max"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"speculative_config.{name} must be an integer of at least 1; "
                                 f"got {v!r}")
        if self.prompt_lookup_min > self.prompt_lookup_max:  # type: ignore[operator]
            raise ValueError(f"speculative_config.prompt_lookup_min ({self.prompt_lookup_min}) "
                             f"must be <= prompt_lookup_max ({self.prompt_lookup_max})")

    @classmethod
    def from_value(cls, value: dict[str, Any] | str | SpeculativeConfig) -> SpeculativeConfig:
        """From LLM(speculative_config={...}) or --speculative-config '{...}' (JSON)."""
        if isinstance(value, SpeculativeConfig):
            return value
        names = sorted(f.name for f in dataclasses.fields(cls))
        value = json_object(value, "speculative_config", names)
        if "num_speculative_tokens" not in value:
            raise ValueError("speculative_config.num_speculative_tokens is required")
        return cls(**value)


def _non_negative(value: str) -> int:
    n = int(value)
    if n < 0:
        raise argparse.ArgumentTypeError(f"must be at least 0, got {n}")
    return n


# The token budget of a generate step on CPU with chunked prefill. A burst of arrivals is
# then prefilled a few prompts a step instead of all at once, so most of it gets its first
# token sooner; past a few hundred rows a CPU step's linears run at their peak rate, so smaller
# steps cost no throughput. Measured with the race's load (2 cores, 128-token prompts; see
# docs/benchmarks.md): bf16 512 against 2048, TTFT p50 at 16 concurrent requests 1,308 -> 643
# ms, at 64 2,720 -> 1,088 ms; fp32 384 against 512, TTFT p50 at 4 concurrent requests
# 409-628 against 472-871 ms; bf16 384 against 512, TTFT p50 at 4 241 against 310 ms and at
# 16 574 against 636 ms. Output tok/s unchanged within noise at 4, 16 and 64 in both dtypes.
# A GPU step is cheap enough that 2048 (vLLM's default) is kept there.
CPU_BATCHED_TOKENS = 384
# Prompt tokens a CPU step keeps room for beside a decode token for each of max_num_seqs
# sequences: with a budget of max_num_seqs alone, a full batch never prefilled again.
CPU_PREFILL_FLOOR = 128


def default_batched_tokens(device: torch.device, task: str, chunked_prefill: bool,
                           max_model_len: int, max_num_seqs: int) -> int:
    """max_num_batched_tokens when not given: whole prompts without chunked prefill; with
    it 2048, or CPU_BATCHED_TOKENS for a generative model on CPU (never below a decode
    token for each of max_num_seqs sequences and CPU_PREFILL_FLOOR prompt tokens)."""
    if not chunked_prefill:
        return max(max_model_len, 2048)
    if device.type == "cpu" and task == "generate":
        return max(CPU_BATCHED_TOKENS, max_num_seqs + CPU_PREFILL_FLOOR)
    return 2048


@dataclass
class EngineArgs:
    model: str | None = None
    served_model_name: str | None = None
    dtype: str = "auto"
    max_model_len: int | None = None
    max_num_seqs: int = 256
    scheduling_policy: str = "fcfs"
    # Admission control: refuse a request that would make more sequences wait than this
    # (vLLM's proposed --max-waiting-queue-length); None: unbounded.
    max_waiting_queue_length: int | None = None
    max_num_batched_tokens: int | None = None
    block_size: int = 16
    gpu_memory_utilization: float = 0.9
    kv_cache_memory: int | None = None  # bytes; overrides gpu_memory_utilization
    num_gpu_blocks_override: int | None = None
    enable_prefix_caching: bool = True
    enable_chunked_prefill: bool = True
    seed: int = 0
    device: str = "auto"
    load_format: str = "auto"
    enforce_eager: bool = False
    attention_backend: str | None = None
    # Benchmarking the frontends alone: the real scheduler path with no model behind it.
    mock_engine: bool = False
    mock_step_ms: float = 0.0
    # Tensor parallelism (torch.distributed), and its ranks over several nodes as torchrun
    # spells it.
    tensor_parallel_size: int = 1
    nnodes: int = 1
    node_rank: int = 0
    master_addr: str = "127.0.0.1"
    master_port: int | None = None
    # vLLM's speculative_config: a dict (LLM), its JSON text (--speculative-config) or a
    # SpeculativeConfig; None: no speculation.
    speculative_config: dict[str, Any] | str | SpeculativeConfig | None = None
    # vLLM's pooler_config for an embedding model: a dict (LLM) or its JSON text
    # (--pooler-config); None: the folder's sentence-transformers settings.
    pooler_config: dict[str, Any] | str | None = None

    @staticmethod
    def add_cli_args(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
        d = EngineArgs()
        parser.add_argument("--model", type=str, default=d.model,
                            help="Hugging Face model folder, or the bundled default's name.")
        parser.add_argument("--served-model-name", type=str, default=None)
        parser.add_argument("--dtype", choices=["auto", *_DTYPES], default=d.dtype,
                            help="auto: float32 on CPU, bfloat16 on CUDA.")
        parser.add_argument("--max-model-len", type=int, default=None)
        parser.add_argument("--max-num-seqs", type=int, default=d.max_num_seqs)
        parser.add_argument("--scheduling-policy", choices=["fcfs", "priority"],
                            default=d.scheduling_policy,
                            help="fcfs: arrival order. priority: a request's `priority` first "
                                 "(lower is sooner), then arrival; preemption takes the "
                                 "lowest-priority running request.")
        parser.add_argument("--max-waiting-queue-length", "--max-num-waiting-requests",
                            type=_non_negative, default=d.max_waiting_queue_length,
                            help="Refuse requests (HTTP 429) while this many sequences wait "
                                 "to be scheduled (default: unbounded; 0 waits for none).")
        parser.add_argument("--max-num-batched-tokens", type=int, default=None)
        parser.add_argument("--block-size", type=int, default=d.block_size)
        parser.add_argument("--gpu-memory-utilization", type=float,
                            default=d.gpu_memory_utilization)
        parser.add_argument("--kv-cache-memory", type=int, default=None,
                            help="KV-cache size in bytes (overrides --gpu-memory-utilization; "
                            "on CPU the default is $HYBRIDLLM_CPU_KVCACHE_SPACE GiB, else 2).")
        parser.add_argument("--num-gpu-blocks-override", type=int, default=None)
        parser.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction,
                            default=d.enable_prefix_caching)
        parser.add_argument("--enable-chunked-prefill", action=argparse.BooleanOptionalAction,
                            default=d.enable_chunked_prefill)
        parser.add_argument("--seed", type=int, default=d.seed)
        parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default=d.device)
        parser.add_argument("--load-format", choices=["auto", "safetensors", "dummy"],
                            default=d.load_format)
        parser.add_argument("--enforce-eager", action="store_true")
        parser.add_argument("--attention-backend", choices=["torch", "triton"], default=None)
        parser.add_argument("--mock-engine", action="store_true",
                            help="No model: real scheduling, dummy tokens (frontend benchmarks).")
        parser.add_argument("--mock-step-ms", type=float, default=d.mock_step_ms,
                            help="With --mock-engine: time each engine step takes.")
        parser.add_argument("--tensor-parallel-size", "-tp", type=int,
                            default=d.tensor_parallel_size,
                            help="Shard the model over this many ranks (torch.distributed: "
                                 "gloo on CPU, NCCL on CUDA).")
        parser.add_argument("--nnodes", type=int, default=d.nnodes,
                            help="Nodes the tensor-parallel ranks are spread over.")
        parser.add_argument("--node-rank", type=int, default=d.node_rank,
                            help="This node's index (0 runs the frontend and rank 0).")
        parser.add_argument("--master-addr", default=d.master_addr,
                            help="Node 0's address, where every rank meets.")
        parser.add_argument("--master-port", type=int, default=d.master_port,
                            help="The rendezvous port on --master-addr (default on one node: "
                                 "a free one).")
        parser.add_argument("--speculative-config", type=str, default=None,
                            help='Speculative decoding as JSON, vLLM\'s keys: e.g. '
                                 '\'{"method": "ngram", "num_speculative_tokens": 4, '
                                 '"prompt_lookup_max": 4, "prompt_lookup_min": 2}\' (n-gram '
                                 'prompt lookup, the only method).')
        parser.add_argument("--pooler-config", "--override-pooler-config", type=str,
                            default=None,
                            help='An embedding model\'s pooling as JSON, vLLM\'s keys: '
                                 'pooling_type (auto, MEAN, CLS, LAST), normalize, '
                                 'enable_chunked_processing (inputs longer than '
                                 '--max-model-len pooled in chunks of it, the chunks averaged '
                                 'by token count), max_embed_len (the longest input taken).')
        return parser

    @classmethod
    def from_cli_args(cls, args: argparse.Namespace) -> EngineArgs:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in vars(args).items() if k in names})

    def resolve(self) -> EngineConfig:
        from hybridllm.models.pooler_config import PoolerConfig
        from hybridllm.models.registry import model_config
        from hybridllm.models.resolve import resolve_model
        from hybridllm.models.task import get_model_task

        folder = resolve_model(self.model)
        task = get_model_task(folder)
        pooler = None
        # An architecture the registry does not list is refused here, before anything loads.
        model_cfg = model_config(folder, task)
        max_positions = default_len = model_cfg.max_positions
        if task == "embed":
            pooler = PoolerConfig.from_folder(folder)
            if self.pooler_config is not None:
                pooler = pooler.with_overrides(self.pooler_config)
            # sentence-transformers' max_seq_length is the model's input limit (as in vLLM).
            default_len = min(pooler.max_seq_length or max_positions, max_positions)
        elif self.pooler_config is not None:
            raise ValueError(f"pooler_config: {folder.name} is a generative model; pooling "
                             "settings apply to embedding models")
        device = torch.device(
            ("cuda" if torch.cuda.is_available() else "cpu") if self.device == "auto"
            else self.device
        )
        if self.dtype == "auto":
            dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
        else:
            dtype = _DTYPES[self.dtype]
        max_model_len = self.max_model_len or default_len
        if max_model_len > max_positions:
            raise ValueError(
                f"max_model_len ({max_model_len}) is larger than the model's "
                f"max_position_embeddings ({max_positions})."
            )
        if task == "generate":
            model_cfg.verify(max_model_len)
        if self.block_size not in (8, 16, 32, 64, 128):
            raise ValueError(f"block_size must be one of 8, 16, 32, 64, 128; got {self.block_size}")
        batched = self.max_num_batched_tokens or default_batched_tokens(
            device, task, self.enable_chunked_prefill, max_model_len, self.max_num_seqs
        )
        if task == "embed" and batched < max_model_len:
            raise ValueError(
                f"max_num_batched_tokens ({batched}) is smaller than max_model_len "
                f"({max_model_len}): an encoder input is never split across steps."
            )
        if not self.enable_chunked_prefill and batched < max_model_len:
            raise ValueError(
                f"max_num_batched_tokens ({batched}) is smaller than max_model_len "
                f"({max_model_len}) with chunked prefill off: long prompts could never run."
            )
        parallel = ParallelConfig(self.tensor_parallel_size, self.nnodes, self.node_rank,
                                  self.master_addr, self.master_port)
        parallel.check()
        if parallel.tensor_parallel_size > 1 and (task != "generate" or self.mock_engine):
            raise ValueError(
                f"--tensor-parallel-size {parallel.tensor_parallel_size}: tensor parallelism "
                "shards a generative model's forward pass; "
                + ("--mock-engine has none" if self.mock_engine
                   else f"{folder.name} is an embedding model (task {task!r})")
            )
        speculative = None
        if self.speculative_config is not None:
            speculative = SpeculativeConfig.from_value(self.speculative_config)
            if task != "generate" or self.mock_engine:
                raise ValueError("speculative_config: speculative decoding verifies drafts "
                                 "with a generative model's forward pass; "
                                 + ("--mock-engine has none" if self.mock_engine
                                    else f"{folder.name} is an embedding model"))
        if parallel.tensor_parallel_size > 1:
            _check_shardable(model_cfg, parallel.tensor_parallel_size, folder.name)
        scheduler = SchedulerConfig(
            max_num_seqs=self.max_num_seqs,
            max_num_batched_tokens=batched,
            max_model_len=max_model_len,
            enable_chunked_prefill=self.enable_chunked_prefill,
            policy=self.scheduling_policy,
        )
        return EngineConfig(
            args=self,
            model_path=folder,
            model=model_cfg,
            served_model_name=self.served_model_name or (self.model or folder.name),
            device=device,
            dtype=dtype,
            scheduler=scheduler,
            task=task,
            pooler=pooler,
            parallel=parallel,
            speculative=speculative,
        )


def _check_shardable(cfg: Any, tp: int, name: str) -> None:
    """Each rank must hold whole heads: refuse at start-up, naming the numbers."""
    sizes = {
        "attention heads": cfg.num_attention_heads,
        "KV heads": cfg.num_key_value_heads,
        "intermediate_size": cfg.intermediate_size,
    }
    bad = [f"{what} ({n})" for what, n in sizes.items() if n % tp]
    if bad:
        raise ValueError(f"--tensor-parallel-size {tp} must divide the {' and the '.join(bad)} "
                         f"of {name}")


@dataclass
class EngineConfig:
    args: EngineArgs
    model_path: Path
    # models.interfaces.DecoderConfig, or ModelConfig (BertConfig) for embed (typed loosely:
    # this module stays import-light)
    model: Any
    served_model_name: str
    device: torch.device
    dtype: torch.dtype
    scheduler: SchedulerConfig
    task: str = "generate"  # models.task.ModelTask: "generate" or "embed"
    pooler: Any = None  # models.pooler_config.PoolerConfig for embed
    parallel: ParallelConfig = ParallelConfig()
    speculative: SpeculativeConfig | None = None

    @property
    def max_model_len(self) -> int:
        return self.scheduler.max_model_len
