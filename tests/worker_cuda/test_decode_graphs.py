"""The CUDA-graph decode path without a GPU: graph-size ladder and bucket choice, and the padded
static-buffer forward (what a graph replays) against the eager forward on a tiny Llama with the
Triton kernels (interpreter on CPU). On CUDA the same test captures and replays real graphs."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from hybridllm.attention.triton_backend import TritonAttentionBackend
from hybridllm.executor.cuda_graph import DecodeGraphs, capture_sizes, padded_size
from hybridllm.kernels.testing import build_metadata
from hybridllm.models.config import LlamaConfig
from hybridllm.models.fused_ops import triton_ops
from hybridllm.models.loader import load_model

TINY = {
    "architectures": ["LlamaForCausalLM"], "hidden_size": 64, "intermediate_size": 96,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "head_dim": 16, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
    "tie_word_embeddings": True, "vocab_size": 200,
}


def test_capture_sizes() -> None:
    assert capture_sizes(256) == [1, 2, 4, *range(8, 257, 8)]
    assert capture_sizes(1) == [1]
    assert capture_sizes(4) == [1, 2, 4]
    assert capture_sizes(10) == [1, 2, 4, 8, 10]  # max_num_seqs itself always has a graph
    assert capture_sizes(1000)[-1] == 512 and capture_sizes(1000)[-2] == 504


def test_padded_size() -> None:
    sizes = capture_sizes(20)
    assert [padded_size(n, sizes) for n in (1, 2, 3, 5, 8, 9, 16, 17, 20)] == [
        1, 2, 4, 8, 8, 16, 16, 20, 20
    ]
    assert padded_size(21, sizes) is None


def test_padded_decode_matches_eager(tmp_path: Path, device: torch.device) -> None:
    (tmp_path / "config.json").write_text(json.dumps(TINY))
    cfg = LlamaConfig.from_folder(tmp_path)
    max_len = 512
    model = load_model(tmp_path, cfg, torch.float32, device, max_len, load_format="dummy")
    model.set_layer_ops(triton_ops())
    backend = TritonAttentionBackend()
    g = torch.Generator().manual_seed(3)
    block_size, num_blocks = 16, 40
    caches = torch.randn(cfg.num_hidden_layers, 2, num_blocks, block_size,
                         cfg.num_key_value_heads, cfg.head_dim, generator=g).to(device)
    eager_caches = list(caches.clone().unbind(0))
    graph_caches = list(caches.clone().unbind(0))
    # max_seqlen_k = max_len plans 4 split-KV partitions for every batch, most of them empty
    # for these short contexts: the replay-time situation of a graph captured at start-up.
    graphs = DecodeGraphs(model, backend, graph_caches, [1, 2, 4, 8],
                          max_blocks_per_seq=max_len // block_size, max_seqlen_k=max_len)
    if device.type == "cuda":
        graphs.capture()

    # A batch of 7 (padded to 8) leaves stale rows behind, then 3 (padded to 4) reuses them.
    for seq_lens in ([5, 40, 17, 2, 33, 64, 9], [30, 3, 21]):
        meta = build_metadata([(1, k) for k in seq_lens], block_size, num_blocks, device, g)
        positions = torch.tensor([k - 1 for k in seq_lens], device=device)
        input_ids = torch.randint(0, cfg.vocab_size, (len(seq_lens),), generator=g).to(device)
        with torch.inference_mode():
            ref = model(input_ids, positions, eager_caches, meta, backend)
            out = graphs.run(input_ids, positions, meta)
        torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
        n, bs = len(seq_lens), padded_size(len(seq_lens), graphs.sizes)
        assert graphs.slot_mapping[n:bs].eq(-1).all() and graphs.seq_lens[n:bs].eq(1).all()
        # Padding rows wrote nothing: the caches differ only by rounding, not by stray rows.
        for a, b in zip(graph_caches, eager_caches):
            torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_profile_batch_is_the_largest_step() -> None:
    from types import SimpleNamespace

    from hybridllm.executor.kv_cache import profile_batch

    def lens(tokens: int, seqs: int, max_len: int) -> list[int]:
        sched = SimpleNamespace(max_num_batched_tokens=tokens, max_num_seqs=seqs,
                                max_model_len=max_len)
        return profile_batch(SimpleNamespace(scheduler=sched))

    assert lens(2048, 256, 8192) == [8] * 256
    assert lens(10, 4, 8192) == [3, 3, 2, 2]
    assert lens(4096, 1, 512) == [512] * 8  # never longer than max_model_len
    assert sum(lens(2050, 256, 8192)) == 2050
