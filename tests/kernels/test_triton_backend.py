"""TritonAttentionBackend vs TorchAttentionBackend: write_kv then forward on one mixed batch."""

from __future__ import annotations

import pytest
import torch

from hybridllm.attention import get_attention_backend
from hybridllm.attention.torch_ref import TorchAttentionBackend
from hybridllm.step_types import AttentionMetadata


def _hand_built_meta(device: torch.device) -> AttentionMetadata:
    """Block size 4; seq 0: 6-token prompt; seq 1: 3-token chunk on a 5-key cached prefix;
    seq 2: decode at position 9; then one padding row (slot -1)."""
    tables = torch.tensor([[3, 0, 0], [1, 5, 0], [2, 7, 4]], dtype=torch.int32)
    positions = [*range(6), 5, 6, 7, 9]
    owners = [0] * 6 + [1] * 3 + [2]
    slots = [int(tables[s, p // 4]) * 4 + p % 4 for s, p in zip(owners, positions)] + [-1]
    return AttentionMetadata(
        slot_mapping=torch.tensor(slots, dtype=torch.int64, device=device),
        cu_seqlens_q=torch.tensor([0, 6, 9, 10], dtype=torch.int32, device=device),
        seq_lens=torch.tensor([6, 8, 10], dtype=torch.int32, device=device),
        block_tables=tables.to(device),
        max_seqlen_q=6,
        max_seqlen_k=10,
        query_lens_host=[6, 3, 1],
        seq_lens_host=[6, 8, 10],
    )


@pytest.mark.parametrize("group", [1, 3])
def test_triton_backend_matches_torch(group: int, device: torch.device) -> None:
    g = torch.Generator().manual_seed(2)
    num_kv_heads, head_dim, num_blocks, block_size = 2, 16, 8, 4
    meta = _hand_built_meta(device)
    caches = torch.randn(2, num_blocks, block_size, num_kv_heads, head_dim, generator=g)
    num_tokens = meta.slot_mapping.shape[0]
    q = torch.randn(num_tokens, num_kv_heads * group, head_dim, generator=g).to(device)
    k = torch.randn(num_tokens, num_kv_heads, head_dim, generator=g).to(device)
    v = torch.randn(num_tokens, num_kv_heads, head_dim, generator=g).to(device)
    outs, written = [], []
    for backend in (get_attention_backend(device, "triton"), TorchAttentionBackend()):
        k_cache, v_cache = caches.clone().to(device).unbind(0)
        backend.write_kv(k, v, k_cache, v_cache, meta.slot_mapping)
        outs.append(backend.forward(q, k_cache, v_cache, meta, 0.25))
        written.append((k_cache, v_cache))
    assert get_attention_backend(device, "triton").name == "triton"
    assert torch.equal(written[0][0], written[1][0]) and torch.equal(written[0][1], written[1][1])
    torch.testing.assert_close(outs[0][:10], outs[1][:10], atol=1e-5, rtol=1e-5)
