"""Builders of random paged-attention batches, shared by the kernel tests and the benchmark,
and the tiny Llama config the model-step tests load with dummy weights."""

from __future__ import annotations

import torch

from hybridllm.step_types import AttentionMetadata

# A two-layer Llama with GQA (6 heads, 2 kv heads), small enough to run a step in milliseconds.
TINY_LLAMA_CONFIG = {
    "architectures": ["LlamaForCausalLM"], "hidden_size": 96, "intermediate_size": 160,
    "num_hidden_layers": 2, "num_attention_heads": 6, "num_key_value_heads": 2,
    "head_dim": 16, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
    "tie_word_embeddings": True, "vocab_size": 300,
}


def build_metadata(
    specs: list[tuple[int, int]],
    block_size: int,
    num_blocks: int,
    device: torch.device | str,
    generator: torch.Generator | None = None,
    num_pad_tokens: int = 0,
) -> AttentionMetadata:
    """specs: (query_len, seq_len) per sequence; the query rows are each sequence's last
    query_len positions. Physical blocks are drawn in shuffled order so table lookups matter;
    num_pad_tokens extra rows at the end get slot -1 and belong to no sequence."""
    blocks_per_seq = [(k + block_size - 1) // block_size for _, k in specs]
    need = sum(blocks_per_seq)
    if need > num_blocks:
        raise ValueError(f"batch needs {need} blocks, cache has {num_blocks}")
    perm = torch.randperm(num_blocks, generator=generator)[:need].tolist()
    max_blocks = max([1, *blocks_per_seq])
    tables = torch.zeros(len(specs), max_blocks, dtype=torch.int32)
    slots: list[int] = []
    cu = [0]
    used = 0
    for i, ((q_len, k_len), nb) in enumerate(zip(specs, blocks_per_seq)):
        if q_len > k_len:
            raise ValueError(f"sequence {i}: {q_len} query rows but only {k_len} keys")
        tables[i, :nb] = torch.tensor(perm[used : used + nb], dtype=torch.int32)
        used += nb
        for pos in range(k_len - q_len, k_len):
            slots.append(int(tables[i, pos // block_size]) * block_size + pos % block_size)
        cu.append(cu[-1] + q_len)
    slots += [-1] * num_pad_tokens
    query_lens = [q for q, _ in specs]
    seq_lens = [k for _, k in specs]
    return AttentionMetadata(
        slot_mapping=torch.tensor(slots, dtype=torch.int64, device=device),
        cu_seqlens_q=torch.tensor(cu, dtype=torch.int32, device=device),
        seq_lens=torch.tensor(seq_lens, dtype=torch.int32, device=device),
        block_tables=tables.to(device),
        max_seqlen_q=max(query_lens, default=0),
        max_seqlen_k=max(seq_lens, default=0),
        query_lens_host=query_lens,
        seq_lens_host=seq_lens,
    )


def random_kv_cache(
    num_blocks: int,
    block_size: int,
    num_kv_heads: int,
    head_dim: int,
    dtype: torch.dtype,
    device: torch.device | str,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Random values everywhere, so a kernel reading a wrong slot shows up as a mismatch."""
    shape = (2, num_blocks, block_size, num_kv_heads, head_dim)
    kv = torch.randn(shape, generator=generator, dtype=torch.float32).to(dtype).to(device)
    return kv[0], kv[1]
