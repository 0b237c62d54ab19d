"""Sizing and allocating the per-layer paged KV-cache tensors."""

from __future__ import annotations

import itertools
import os

import torch

from hybridllm.attention import AttentionBackend
from hybridllm.config import EngineConfig, cpu_default_kv_cache_bytes
from hybridllm.kernels.cpu_memory import HugePageArena
from hybridllm.models.interfaces import CausalLM
from hybridllm.step_types import AttentionMetadata, WindowPool

# Set: every layer's KV in the one pool, sliding-window layers' too (no WindowPool).
DISABLE_WINDOW_POOL_ENV = "HYBRIDLLM_DISABLE_WINDOW_KV"


def kv_heads_per_rank(config: EngineConfig) -> int:
    """The KV heads one tensor-parallel rank caches."""
    return config.model.num_key_value_heads // config.parallel.tensor_parallel_size


def bytes_per_block(config: EngineConfig, block_size: int) -> int:
    m = config.model
    element = torch.tensor([], dtype=config.dtype).element_size()
    return 2 * m.num_hidden_layers * block_size * kv_heads_per_rank(config) * m.head_dim * element


def needs_profile(config: EngineConfig) -> bool:
    """Only the --gpu-memory-utilization sizing needs the peak of a profiling forward pass."""
    args = config.args
    return (
        config.device.type == "cuda"
        and args.kv_cache_memory is None
        and args.num_gpu_blocks_override is None
    )


def kv_budget_bytes(config: EngineConfig, peak_bytes: int | None = None) -> int:
    """--kv-cache-memory if given; else on CUDA what --gpu-memory-utilization leaves after
    peak_bytes (weights plus the activations of the caller's profiling pass at
    max_num_batched_tokens; the allocator's peak if not given), on CPU a fixed default."""
    args = config.args
    if args.kv_cache_memory is not None:
        return args.kv_cache_memory
    if config.device.type != "cuda":
        return cpu_default_kv_cache_bytes()
    free, total = torch.cuda.mem_get_info(config.device)
    used_by_others = total - free - torch.cuda.memory_reserved(config.device)
    peak = torch.cuda.max_memory_allocated(config.device) if peak_bytes is None else peak_bytes
    budget = int(total * args.gpu_memory_utilization - peak - max(used_by_others, 0))
    if budget <= 0:
        raise ValueError(
            f"no memory left for the KV cache: {peak / 2**30:.2f} GiB peak for weights and "
            f"activations, {max(used_by_others, 0) / 2**30:.2f} GiB used by other processes, "
            f"of {total * args.gpu_memory_utilization / 2**30:.2f} GiB allowed. Raise "
            "--gpu-memory-utilization or lower --max-num-batched-tokens."
        )
    return budget


def num_kv_blocks(config: EngineConfig, peak_bytes: int | None = None) -> int:
    args = config.args
    if args.num_gpu_blocks_override is not None:
        blocks = args.num_gpu_blocks_override
    else:
        blocks = kv_budget_bytes(config, peak_bytes) // bytes_per_block(config, args.block_size)
    if blocks * args.block_size < config.max_model_len:
        raise ValueError(
            f"The model's max seq len ({config.max_model_len}) is larger than the maximum "
            f"number of tokens that can be stored in KV cache ({blocks * args.block_size}). "
            "Increase --kv-cache-memory or decrease --max-model-len."
        )
    return blocks


def plan_window_pool(config: EngineConfig, num_blocks: int) -> tuple[int, WindowPool | None]:
    """Split the memory of `num_blocks` blocks (every layer's KV in one pool) between the
    full-attention layers' pool and the sliding-window layers' own (WindowPool): the latter
    holds each of max_num_seqs sequences' window plus a partial block, and one step's new
    tokens, so it never runs out before the main pool does; what it spares goes to more main
    blocks. Returns (main blocks, pool), or (num_blocks, None) where nothing is spared: no
    windowed layer, a window as long as max_model_len, or a pool as large as the main one.
    With no full-attention layer (Mistral), the main pool holds no tensor: only block ids."""
    m = config.model
    windows = [m.layer_window(i) for i in range(m.num_hidden_layers)]
    layers = tuple(i for i, w in enumerate(windows) if w is not None)
    if not layers or os.environ.get(DISABLE_WINDOW_POOL_ENV):
        return num_blocks, None
    window = max(w for w in windows if w is not None)
    if window >= config.max_model_len:
        return num_blocks, None
    bs, sched = config.args.block_size, config.scheduler
    num_window = (sched.max_num_seqs * ((window - 1) // bs + 2)
                  + -(-sched.max_num_batched_tokens // bs))
    num_global = m.num_hidden_layers - len(layers)
    if num_global == 0:
        pool = WindowPool(window, num_blocks, layers)
        return max(num_blocks, sched.max_num_seqs * -(-config.max_model_len // bs)), pool
    if num_window >= num_blocks:
        return num_blocks, None
    main = (num_blocks * m.num_hidden_layers - len(layers) * num_window) // num_global
    return main, WindowPool(window, num_window, layers)


def allocate_kv_caches(config: EngineConfig, num_blocks: int,
                       window_pool: WindowPool | None = None) -> list[torch.Tensor]:
    """One [2, blocks, block_size, kv heads, head dim] tensor per layer: the windowed
    layers' with the pool's blocks, the others' with num_blocks."""
    m = config.model
    windowed = set(window_pool.layers) if window_pool is not None else set()

    def shape(layer: int) -> tuple[int, ...]:
        blocks = window_pool.num_blocks if window_pool and layer in windowed else num_blocks
        return (2, blocks, config.args.block_size, kv_heads_per_rank(config), m.head_dim)

    shapes = [shape(i) for i in range(m.num_hidden_layers)]
    if torch.device(config.device).type == "cpu":
        # Decode attention streams the cache block by block: in huge pages (one mapping,
        # its pages allocated as blocks are first written).
        arena = HugePageArena(sum(HugePageArena.bytes_for(s, config.dtype) for s in shapes))
        return [arena.zeros(s, config.dtype) for s in shapes]
    return [torch.zeros(s, dtype=config.dtype, device=config.device) for s in shapes]


def profile_batch(config: EngineConfig) -> list[int]:
    """Prompt lengths of the largest step the scheduler can form: max_num_batched_tokens
    spread over as many sequences as it admits, none longer than max_model_len."""
    sched = config.scheduler
    tokens = sched.max_num_batched_tokens
    num_seqs = max(min(sched.max_num_seqs, tokens), -(-tokens // sched.max_model_len))
    return [tokens // num_seqs + (i < tokens % num_seqs) for i in range(num_seqs)]


def _prefill_metadata(lens: list[int], block_size: int, device: torch.device
                      ) -> AttentionMetadata:
    """Whole prompts of these lengths, each on its own consecutive blocks from block 0."""
    tables, slots, start = [], [], 0
    for n in lens:
        nb = -(-n // block_size)
        tables.append(list(range(start, start + nb)))
        slots.extend(range(start * block_size, start * block_size + n))
        start += nb
    width = max(len(t) for t in tables)
    return AttentionMetadata(
        slot_mapping=torch.tensor(slots, dtype=torch.int64, device=device),
        cu_seqlens_q=torch.tensor([0, *itertools.accumulate(lens)], dtype=torch.int32,
                                  device=device),
        seq_lens=torch.tensor(lens, dtype=torch.int32, device=device),
        block_tables=torch.tensor([t + [0] * (width - len(t)) for t in tables],
                                  dtype=torch.int32, device=device),
        max_seqlen_q=max(lens), max_seqlen_k=max(lens),
        query_lens_host=list(lens), seq_lens_host=list(lens),
    )


@torch.inference_mode()
def profile_peak_bytes(config: EngineConfig, model: CausalLM,
                       backend: AttentionBackend) -> int:
    """Weights plus the activation peak of one worst-case step: the forward over
    profile_batch(), LM-head logits and their log_softmax for every row (prompt logprobs can
    ask for that), and the GPU sampler over one row per sequence with penalties on. Runs on a
    scratch KV cache just large enough, whose bytes are left out of the peak."""
    from hybridllm.kernels.sampler import sample
    from hybridllm.kernels.sampler_ref import SamplingTensors

    dev, bs = config.device, config.args.block_size
    lens = profile_batch(config)
    num_blocks = sum(-(-n // bs) for n in lens)
    scratch = allocate_kv_caches(config, num_blocks)
    scratch_bytes = num_blocks * bytes_per_block(config, bs)
    meta = _prefill_metadata(lens, bs, dev)
    positions = torch.cat([torch.arange(n) for n in lens]).to(dev)
    input_ids = torch.zeros_like(positions)
    torch.cuda.synchronize(dev)
    torch.cuda.reset_peak_memory_stats(dev)
    hidden = model(input_ids, positions, scratch, meta, backend)
    model.compute_logits(hidden).log_softmax(dim=-1)
    logits = model.compute_logits(hidden[meta.cu_seqlens_q[1:].long() - 1])
    b, vocab = logits.shape

    def full(value: float, dtype: torch.dtype) -> torch.Tensor:
        return torch.full((b,), value, dtype=dtype, device=dev)

    counts = torch.zeros(b, vocab, dtype=torch.int32, device=dev)
    sample(logits, SamplingTensors(
        temperature=full(1.0, torch.float32), top_k=full(50, torch.int32),
        top_p=full(0.9, torch.float32), min_p=full(0.0, torch.float32),
        repetition_penalty=full(1.1, torch.float32), presence_penalty=full(0.1, torch.float32),
        frequency_penalty=full(0.1, torch.float32), seeds=full(0, torch.int64),
        steps=full(0, torch.int64), prompt_counts=counts, output_counts=counts.clone(),
    ))
    torch.cuda.synchronize(dev)
    peak = torch.cuda.max_memory_allocated(dev) - scratch_bytes
    del scratch, hidden, logits, counts
    torch.cuda.empty_cache()
    return peak
