"""Qwen3: the Llama layout with an RMSNorm over each query and key head (its own weight of
head_dim, shared by the heads) before RoPE; head_dim is given by the config (not
hidden_size / heads), and projections have biases only if attention_bias says so."""

from __future__ import annotations

import torch
from torch import nn

from hybridllm.distributed.parallel_state import TensorParallelGroup
from hybridllm.models.config import LlamaConfig
from hybridllm.models.layers import LayerOps
from hybridllm.models.llama import LlamaAttention, LlamaForCausalLM


class Qwen3Attention(LlamaAttention):
    def __init__(
        self, cfg: LlamaConfig, tp: TensorParallelGroup, qkv_bias: bool, o_bias: bool
    ) -> None:
        super().__init__(cfg, tp, qkv_bias, o_bias)
        self.eps = cfg.rms_norm_eps
        # Per head, so every tensor-parallel rank holds them whole.
        self.q_norm = nn.Parameter(torch.ones(cfg.head_dim))
        self.k_norm = nn.Parameter(torch.ones(cfg.head_dim))

    def checkpoint_names(self) -> set[str]:
        return super().checkpoint_names() | {"q_norm.weight", "k_norm.weight"}

    def before_rotary(
        self, q: torch.Tensor, k: torch.Tensor, ops: LayerOps
    ) -> tuple[torch.Tensor, torch.Tensor]:
        # q / k are strided views of the fused qkv output; the Triton norm takes rows of
        # head_dim, which reshape gives (a copy here).
        d = self.head_dim
        q = ops.rms_norm(q.reshape(-1, d), self.q_norm, self.eps).view(-1, self.num_heads, d)
        k = ops.rms_norm(k.reshape(-1, d), self.k_norm, self.eps).view(-1, self.num_kv_heads, d)
        return q, k


class Qwen3ForCausalLM(LlamaForCausalLM):
    def make_attention(self, cfg: LlamaConfig, tp: TensorParallelGroup) -> LlamaAttention:
        return Qwen3Attention(cfg, tp, qkv_bias=cfg.attention_bias, o_bias=cfg.attention_bias)
