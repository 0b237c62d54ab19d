"""Qwen2: the Llama layout with biases on the q / k / v projections (always: Qwen2 configs do
not say so) and none on o_proj."""

from __future__ import annotations

from hybridllm.distributed.parallel_state import TensorParallelGroup
from hybridllm.models.config import LlamaConfig
from hybridllm.models.llama import LlamaAttention, LlamaForCausalLM


class Qwen2ForCausalLM(LlamaForCausalLM):
    def make_attention(self, cfg: LlamaConfig, tp: TensorParallelGroup) -> LlamaAttention:
        return LlamaAttention(cfg, tp, qkv_bias=True, o_bias=False)
