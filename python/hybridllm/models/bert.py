"""BERT-family encoder (BERT, RoBERTa, XLM-R) over a packed batch of whole sequences.

Post-LayerNorm blocks: x = LN(x + Attn(x)); x = LN(x + FFN(x)), bidirectional attention
within each sequence (attention/encoder.py), absolute position and token-type embeddings.
Plain torch ops, so it runs on CPU and CUDA alike; on CPU in fp32 the projections go through
oneDNN with packed weights (pack_for_cpu), the FFN activation and both residual additions
fused into their GEMMs (13% off the FFN at 2,048 rows, same values). Inputs carry one
segment: token type 0.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import torch
import torch.nn.functional as F
from torch import nn

from hybridllm.attention.encoder import encoder_attention
from hybridllm.models.bert_config import BertConfig
from hybridllm.models.cpu_linear import PackedLinear, pack_linears
from hybridllm.step_types import EncoderMetadata

_ACTS = {
    "gelu": F.gelu,
    "gelu_new": lambda x: F.gelu(x, approximate="tanh"),
    "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "relu": F.relu,
}
# The same activations as oneDNN post-ops (attr, algorithm), for packed CPU linears.
_ONEDNN_ACTS = {
    "gelu": ("gelu", "none"),
    "gelu_new": ("gelu", "tanh"),
    "gelu_pytorch_tanh": ("gelu", "tanh"),
    "relu": ("relu", ""),
}


class BertLayer(nn.Module):
    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        h = cfg.hidden_size
        self.num_heads, self.head_dim = cfg.num_attention_heads, cfg.head_dim
        self.scale = self.head_dim**-0.5
        self.qkv = nn.Linear(h, 3 * h)  # query, key, value fused into one GEMM
        self.attn_out = nn.Linear(h, h)
        self.attn_norm = nn.LayerNorm(h, eps=cfg.layer_norm_eps)
        self.ffn_in = nn.Linear(h, cfg.intermediate_size)
        self.ffn_out = nn.Linear(cfg.intermediate_size, h)
        self.ffn_norm = nn.LayerNorm(h, eps=cfg.layer_norm_eps)
        self.act_name = cfg.hidden_act

    def forward(self, x: torch.Tensor, meta: EncoderMetadata) -> torch.Tensor:
        t, h = x.shape
        q, k, v = self.qkv(x).view(t, 3, self.num_heads, self.head_dim).unbind(1)
        a = encoder_attention(q, k, v, meta, self.scale).reshape(t, h)
        x = self.attn_norm(_linear_add(self.attn_out, a, x))
        return self.ffn_norm(_linear_add(self.ffn_out, self._ffn_in_act(x), x))

    def _ffn_in_act(self, x: torch.Tensor) -> torch.Tensor:
        if isinstance(self.ffn_in, PackedLinear):
            return self.ffn_in.forward_act(x, *_ONEDNN_ACTS[self.act_name])
        return _ACTS[self.act_name](self.ffn_in(x))


def _linear_add(linear: nn.Module, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
    """residual + linear(x); packed on CPU, the addition rides in the GEMM."""
    if isinstance(linear, PackedLinear):
        return linear.forward_add(x, residual)
    return residual + linear(x)


class BertModel(nn.Module):
    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        self.cfg = cfg
        h = cfg.hidden_size
        self.word_embeddings = nn.Embedding(cfg.vocab_size, h)
        self.position_embeddings = nn.Embedding(cfg.max_position_embeddings, h)
        self.token_type_embeddings = nn.Embedding(max(cfg.type_vocab_size, 1), h)
        self.embed_norm = nn.LayerNorm(h, eps=cfg.layer_norm_eps)
        self.layers = nn.ModuleList(BertLayer(cfg) for _ in range(cfg.num_hidden_layers))

    def pack_for_cpu(self) -> None:
        pack_linears(self.layers)

    def forward(
        self, input_ids: torch.Tensor, positions: torch.Tensor, meta: EncoderMetadata
    ) -> torch.Tensor:
        """input_ids, positions: [T] (positions from 0 in each sequence) -> hidden [T, H]."""
        x = self.word_embeddings(input_ids)
        x = x + self.position_embeddings(positions + self.cfg.position_offset)
        x = self.embed_norm(x + self.token_type_embeddings.weight[0])
        for layer in self.layers:
            x = layer(x, meta)
        return x

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Load Hugging Face names (with or without the bert./roberta. prefix)."""
        params = dict(self.named_parameters())
        loaded: set[str] = set()
        for name, tensor in weights:
            target, shard = _map_hf_name(name)
            if target is None:
                continue
            param = params[target]
            if shard is not None:  # query, key or value: a third of the fused qkv rows
                rows = param.shape[0] // 3
                param, target = param.narrow(0, shard * rows, rows), f"{target}#{shard}"
            with torch.no_grad():
                param.copy_(tensor.to(param.dtype))
            loaded.add(target)
        expected = {n for n in params if ".qkv." not in n}
        expected |= {f"{n}#{s}" for n in params if ".qkv." in n for s in range(3)}
        missing = expected - loaded
        if missing:
            raise ValueError(f"checkpoint is missing {len(missing)} tensors, e.g. {min(missing)}")


_SKIP = re.compile(r"(^|\.)(pooler|cls|lm_head)\.|position_ids$")
_LAYER = re.compile(r"^encoder\.layer\.(\d+)\.(.+)$")
_LAYER_NAMES = {
    "attention.self.query": ("qkv", 0),
    "attention.self.key": ("qkv", 1),
    "attention.self.value": ("qkv", 2),
    "attention.output.dense": ("attn_out", None),
    "attention.output.LayerNorm": ("attn_norm", None),
    "intermediate.dense": ("ffn_in", None),
    "output.dense": ("ffn_out", None),
    "output.LayerNorm": ("ffn_norm", None),
}


def _map_hf_name(name: str) -> tuple[str | None, int | None]:
    """HF tensor name -> (this module's parameter, q/k/v shard index or None)."""
    if _SKIP.search(name):
        return None, None
    for prefix in ("bert.", "roberta.", "model."):
        name = name.removeprefix(prefix)
    # Old checkpoints name LayerNorm parameters gamma and beta.
    name = name.replace("LayerNorm.gamma", "LayerNorm.weight")
    name = name.replace("LayerNorm.beta", "LayerNorm.bias")
    module, _, leaf = name.rpartition(".")
    if module == "embeddings.LayerNorm":
        return f"embed_norm.{leaf}", None
    if module.startswith("embeddings."):
        return f"{module.removeprefix('embeddings.')}.{leaf}", None
    match = _LAYER.match(module)
    if match and match.group(2) in _LAYER_NAMES:
        target, shard = _LAYER_NAMES[match.group(2)]
        return f"layers.{match.group(1)}.{target}.{leaf}", shard
    raise ValueError(f"unexpected tensor {name!r} in an encoder checkpoint")
