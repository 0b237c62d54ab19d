"""Sizing and allocating the per-layer paged KV-cache tensors."""

from __future__ import annotations

import torch

from hybridllm.config import CPU_DEFAULT_KV_CACHE_BYTES, EngineConfig


def bytes_per_block(config: EngineConfig, block_size: int) -> int:
    m = config.model
    element = torch.tensor([], dtype=config.dtype).element_size()
    return 2 * m.num_hidden_layers * block_size * m.num_key_value_heads * m.head_dim * element


def kv_budget_bytes(config: EngineConfig) -> int:
    """--kv-cache-memory if given; else on CUDA what --gpu-memory-utilization leaves after the
    weights and a profiling pass (measured by the caller), on CPU a fixed default."""
    args = config.args
    if args.kv_cache_memory is not None:
        return args.kv_cache_memory
    if config.device.type != "cuda":
        return CPU_DEFAULT_KV_CACHE_BYTES
    free, total = torch.cuda.mem_get_info(config.device)
    used_by_others = total - free - torch.cuda.memory_reserved(config.device)
    peak = torch.cuda.max_memory_allocated(config.device)
    return int(total * args.gpu_memory_utilization - peak - max(used_by_others, 0))


def num_kv_blocks(config: EngineConfig) -> int:
    args = config.args
    if args.num_gpu_blocks_override is not None:
        blocks = args.num_gpu_blocks_override
    else:
        blocks = kv_budget_bytes(config) // bytes_per_block(config, args.block_size)
    if blocks * args.block_size < config.max_model_len:
        raise ValueError(
            f"The model's max seq len ({config.max_model_len}) is larger than the maximum "
            f"number of tokens that can be stored in KV cache ({blocks * args.block_size}). "
            "Increase --kv-cache-memory or decrease --max-model-len."
        )
    return blocks


def allocate_kv_caches(config: EngineConfig, num_blocks: int) -> list[torch.Tensor]:
    m = config.model
    shape = (2, num_blocks, config.args.block_size, m.num_key_value_heads, m.head_dim)
    return [
        torch.zeros(shape, dtype=config.dtype, device=config.device)
        for _ in range(m.num_hidden_layers)
    ]
