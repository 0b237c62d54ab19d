"""Llama-family decoder over a paged KV cache: Llama and Mistral here, Qwen2 (models/qwen2.py)
and Qwen3 (models/qwen3.py) as subclasses that change how attention is built.

forward() takes a flat batch of tokens from many sequences (prompt chunks and decode tokens
mixed) and returns hidden states; compute_logits() runs the LM head only on the rows asked for.
Inside forward, submodules are called through `.forward`: nn.Module.__call__ (hook handling,
none used here) cost ~2 us a call, ~210 calls a decode step.

Under tensor parallelism (a TensorParallelGroup of world size T) each rank holds 1/T of the
attention heads and KV heads (column-parallel qkv), of the MLP columns (column-parallel
gate_up) and the matching input rows of o_proj and down_proj (row-parallel: their outputs are
summed over ranks), and 1/T of the vocabulary's LM-head rows (logits gathered over ranks).
Embeddings and norms are replicated.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

import torch
from torch import nn

from hybridllm.attention import AttentionBackend
from hybridllm.distributed.parallel_state import SINGLE, TensorParallelGroup
from hybridllm.models import layers
from hybridllm.models.config import LlamaConfig
from hybridllm.models.cpu_linear import (
    DECODER_PANEL_ROWS,
    PackedLinear,
    PackedSiluMulLinear,
    pack_linears,
)
from hybridllm.models.layers import LayerOps
from hybridllm.step_types import AttentionMetadata


class LlamaAttention(nn.Module):
    """qkv_bias: biases on q / k / v; o_bias: on o_proj (under tensor parallelism rank 0
    alone holds it, so the all-reduce adds it once)."""

    def __init__(
        self,
        cfg: LlamaConfig,
        tp: TensorParallelGroup = SINGLE,
        qkv_bias: bool = False,
        o_bias: bool = False,
    ) -> None:
        super().__init__()
        self.tp = tp
        self.num_heads = tp.shard(cfg.num_attention_heads, "the attention heads")
        self.num_kv_heads = tp.shard(cfg.num_key_value_heads, "the KV heads")
        self.head_dim = cfg.head_dim
        self.q_size = self.num_heads * self.head_dim
        self.kv_size = self.num_kv_heads * self.head_dim
        self.scale = self.head_dim**-0.5
        # A sliding-window layer's window (set by the model per layer); None: full attention.
        self.window: int | None = None
        self.qkv_proj = nn.Linear(cfg.hidden_size, self.q_size + 2 * self.kv_size, bias=qkv_bias)
        self.o_proj = nn.Linear(self.q_size, cfg.hidden_size, bias=o_bias)

    def checkpoint_names(self) -> set[str]:
        """This layer's tensors in a checkpoint, relative to `self_attn.`."""
        names = {f"{x}_proj.weight" for x in "qkvo"}
        if self.qkv_proj.bias is not None:
            names |= {f"{x}_proj.bias" for x in "qkv"}
        if self.o_proj.bias is not None:
            names.add("o_proj.bias")
        return names

    def before_rotary(
        self, q: torch.Tensor, k: torch.Tensor, ops: LayerOps
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """q [T, H, D] and k [T, Hkv, D] as RoPE gets them (Qwen3 normalizes each head here)."""
        return q, k

    def forward(
        self,
        x: torch.Tensor,
        positions: torch.Tensor,
        cos_sin: torch.Tensor,
        kv_cache: torch.Tensor,
        meta: AttentionMetadata,
        backend: AttentionBackend,
        ops: LayerOps,
    ) -> torch.Tensor:
        q, k, v = self.qkv_proj.forward(x).split([self.q_size, self.kv_size, self.kv_size], dim=-1)
        q, k = self.before_rotary(
            q.view(-1, self.num_heads, self.head_dim),
            k.view(-1, self.num_kv_heads, self.head_dim),
            ops,
        )
        q, k = ops.rotary_qk(q, k, positions, cos_sin)
        v = v.view(-1, self.num_kv_heads, self.head_dim)
        key_cache, value_cache = kv_cache[0], kv_cache[1]
        if self.window is not None and meta.windowed is not None:
            meta = meta.windowed  # this layer's KV is in the windowed layers' own pool
        backend.write_kv(k, v, key_cache, value_cache, meta.slot_mapping)
        out = backend.forward(
            q, key_cache, value_cache, meta, self.scale, key=k, value=v, window=self.window
        )
        return self.tp.all_reduce(self.o_proj.forward(out.reshape(-1, self.q_size)))


class LlamaMLP(nn.Module):
    # pack_linears may pack this projection with SiLU-and-mul in its epilogue
    # (cpu_linear.PackedSiluMulLinear), which returns silu(gate) * up itself.
    silu_gate_up = "gate_up_proj"

    def __init__(self, cfg: LlamaConfig, tp: TensorParallelGroup = SINGLE) -> None:
        super().__init__()
        self.tp = tp
        inter = tp.shard(cfg.intermediate_size, "intermediate_size")
        self.gate_up_proj = nn.Linear(cfg.hidden_size, 2 * inter, bias=False)
        self.down_proj = nn.Linear(inter, cfg.hidden_size, bias=False)

    def forward(self, x: torch.Tensor, ops: LayerOps) -> torch.Tensor:
        if isinstance(self.gate_up_proj, PackedSiluMulLinear):
            h = self.gate_up_proj.forward(x)
        else:
            h = ops.silu_and_mul(self.gate_up_proj.forward(x))
        return self.tp.all_reduce(self.down_proj.forward(h))


class LlamaDecoderLayer(nn.Module):
    def __init__(
        self, cfg: LlamaConfig, attention: LlamaAttention, tp: TensorParallelGroup = SINGLE
    ) -> None:
        super().__init__()
        self.eps = cfg.rms_norm_eps
        self.self_attn = attention
        self.mlp = LlamaMLP(cfg, tp)
        self.input_layernorm = nn.Parameter(torch.ones(cfg.hidden_size))
        self.post_attention_layernorm = nn.Parameter(torch.ones(cfg.hidden_size))

    def forward(
        self,
        x: torch.Tensor,
        residual: torch.Tensor | None,
        positions: torch.Tensor,
        cos_sin: torch.Tensor,
        kv_cache: torch.Tensor,
        meta: AttentionMetadata,
        backend: AttentionBackend,
        ops: LayerOps,
        keep: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """keep: the last layer's rows to go on with after attention (every row's keys and
        values are in the cache by then)."""
        if residual is None:
            residual = x  # the embedding output, owned by this forward (fused ops update it)
            h = ops.rms_norm(x, self.input_layernorm, self.eps)
        else:
            h, residual = ops.add_rms_norm(x, residual, self.input_layernorm, self.eps)
        h = self.self_attn.forward(h, positions, cos_sin, kv_cache, meta, backend, ops)
        if keep is not None:
            h, residual = h.index_select(0, keep), residual.index_select(0, keep)
        h, residual = ops.add_rms_norm(h, residual, self.post_attention_layernorm, self.eps)
        return self.mlp.forward(h, ops), residual


class LlamaForCausalLM(nn.Module):
    config_class = LlamaConfig

    def __init__(
        self, cfg: LlamaConfig, max_positions: int, tp: TensorParallelGroup = SINGLE
    ) -> None:
        super().__init__()
        self.cfg = cfg
        self.tp = tp
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(self.make_layer(cfg, tp) for _ in range(cfg.num_hidden_layers))
        for i, layer in enumerate(self.layers):
            layer.self_attn.window = cfg.layer_window(i)
        self.norm = nn.Parameter(torch.ones(cfg.hidden_size))
        # Vocab-parallel: rank r holds rows [r * V', (r + 1) * V') of the vocabulary padded to
        # T * V' (the padding rows stay zero; their logits are cut off after the gather). A
        # tied head gets its own copy of the embedding's rows then.
        self.vocab_per_rank = -(-cfg.vocab_size // tp.world_size)
        self.lm_head = (
            None
            if cfg.tie_word_embeddings and tp.world_size == 1
            else nn.Linear(cfg.hidden_size, self.vocab_per_rank, bias=False)
        )
        cos_sin = layers.rope_cos_sin(cfg.head_dim, max_positions, cfg.rope_theta, cfg.rope_scaling)
        self.register_buffer("cos_sin", cos_sin, persistent=False)
        # Chosen once after loading (set_layer_ops): torch functions, or fused Triton kernels.
        self.ops: LayerOps = layers.TORCH_OPS
        # The LM head with a packed weight, once pack_for_cpu() has run.
        self.packed_lm_head: PackedLinear | None = None

    def make_layer(self, cfg: LlamaConfig, tp: TensorParallelGroup) -> nn.Module:
        """One decoder layer (Gemma 3 has its own, models/gemma3.py)."""
        return LlamaDecoderLayer(cfg, self.make_attention(cfg, tp), tp)

    def make_attention(self, cfg: LlamaConfig, tp: TensorParallelGroup) -> LlamaAttention:
        """One layer's attention: where the family's variants differ. Llama's config says
        whether every projection has a bias (Mistral's says nothing: none)."""
        return LlamaAttention(cfg, tp, qkv_bias=cfg.attention_bias, o_bias=cfg.attention_bias)

    @property
    def dtype(self) -> torch.dtype:
        return self.embed_tokens.weight.dtype

    def set_layer_ops(self, ops: LayerOps) -> None:
        self.ops = ops

    def pack_for_cpu(self) -> None:
        """Every projection and the LM head through the panel kernel's packed weights (after
        loading), every call in both dtypes (cpu_linear.DECODER_PANEL_ROWS)."""
        weight = self.embed_tokens.weight if self.lm_head is None else self.lm_head.weight
        self.packed_lm_head = PackedLinear(weight, None, DECODER_PANEL_ROWS)
        pack_linears(self.layers, DECODER_PANEL_ROWS)

    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        kv_caches: list[torch.Tensor],
        meta: AttentionMetadata,
        backend: AttentionBackend,
        keep: torch.Tensor | None = None,
    ) -> torch.Tensor:
        x = self.embed_tokens(input_ids)
        residual = None
        last = len(self.layers) - 1
        for i, (layer, kv_cache) in enumerate(zip(self.layers, kv_caches)):
            x, residual = layer.forward(
                x, residual, positions, self.cos_sin, kv_cache, meta, backend, self.ops,
                keep if i == last else None,
            )
        x, _ = self.ops.add_rms_norm(x, residual, self.norm, self.cfg.rms_norm_eps)
        return x

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        if self.packed_lm_head is not None:
            logits = self.packed_lm_head(hidden)
        else:
            weight = self.embed_tokens.weight if self.lm_head is None else self.lm_head.weight
            logits = torch.matmul(hidden, weight.t())
        if self.tp.world_size > 1:
            logits = self.tp.all_gather_last(logits)[:, : self.cfg.vocab_size]
        return logits.float()

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Load Hugging Face names, fusing q/k/v and gate/up into their packed projections."""
        params = dict(self.named_parameters())
        loaded: set[str] = set()
        local = _local_config(self.cfg, self.tp)
        for name, tensor in weights:
            if self.tp.world_size > 1 and name == "model.embed_tokens.weight" and (
                self.cfg.tie_word_embeddings
            ):
                self._load_vocab_rows(params["lm_head.weight"], tensor)
            target, shard = _map_hf_name(name, local)
            if target is None:
                continue
            param = params[target]
            with torch.no_grad():
                if target == "lm_head.weight":
                    self._load_vocab_rows(param, tensor)
                elif shard is None:
                    param.copy_(_rank_slice(name, tensor, self.tp).to(param.dtype))
                else:
                    start, size = shard
                    part = _rank_slice(name, tensor, self.tp)
                    param.narrow(0, start, size).copy_(part.to(param.dtype))
            loaded.add(name)
        missing = self._checkpoint_names() - loaded
        if missing:
            raise ValueError(f"checkpoint is missing {len(missing)} tensors, e.g. {min(missing)}")

    @torch.no_grad()
    def _load_vocab_rows(self, param: torch.Tensor, full: torch.Tensor) -> None:
        """This rank's rows of a [vocab, hidden] matrix into the vocab-parallel head."""
        start = self.tp.rank * self.vocab_per_rank
        rows = full[start : start + self.vocab_per_rank]
        param.zero_()
        param[: rows.shape[0]].copy_(rows.to(param.dtype))

    def _checkpoint_names(self) -> set[str]:
        """Every tensor a checkpoint of this model must have."""
        names = {"model.embed_tokens.weight", "model.norm.weight"}
        if not self.cfg.tie_word_embeddings:
            names.add("lm_head.weight")
        for i, layer in enumerate(self.layers):
            p = f"model.layers.{i}."
            names |= {p + "input_layernorm.weight", p + "post_attention_layernorm.weight"}
            names |= {p + "self_attn." + n for n in layer.self_attn.checkpoint_names()}
            names |= {p + f"mlp.{x}_proj.weight" for x in ("gate", "up", "down")}
        return names


def _local_config(cfg: LlamaConfig, tp: TensorParallelGroup) -> LlamaConfig:
    """The shapes one rank holds: its heads, KV heads and MLP columns."""
    if tp.world_size == 1:
        return cfg
    return dataclasses.replace(
        cfg,
        num_attention_heads=tp.shard(cfg.num_attention_heads, "the attention heads"),
        num_key_value_heads=tp.shard(cfg.num_key_value_heads, "the KV heads"),
        intermediate_size=tp.shard(cfg.intermediate_size, "intermediate_size"),
    )


# Column-parallel checkpoint tensors are cut along their output rows, row-parallel ones along
# their input columns; everything else (embeddings, norms) is replicated.
_COLUMN_PARALLEL = ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj")
_ROW_PARALLEL = ("o_proj", "down_proj")


def _rank_slice(name: str, tensor: torch.Tensor, tp: TensorParallelGroup) -> torch.Tensor:
    if tp.world_size == 1:
        return tensor
    parts = name.split(".")
    if any(p in parts for p in _COLUMN_PARALLEL):
        return tensor.chunk(tp.world_size, dim=0)[tp.rank]
    if any(p in parts for p in _ROW_PARALLEL):
        if tensor.dim() == 1:  # a bias: added once, by rank 0, to the summed output
            return tensor if tp.rank == 0 else torch.zeros_like(tensor)
        return tensor.chunk(tp.world_size, dim=1)[tp.rank]
    return tensor


def _shards(cfg: LlamaConfig) -> dict[str, tuple[str, int, int]]:
    q = cfg.num_attention_heads * cfg.head_dim
    kv = cfg.num_key_value_heads * cfg.head_dim
    inter = cfg.intermediate_size
    return {
        "q_proj": ("qkv_proj", 0, q),
        "k_proj": ("qkv_proj", q, kv),
        "v_proj": ("qkv_proj", q + kv, kv),
        "gate_proj": ("gate_up_proj", 0, inter),
        "up_proj": ("gate_up_proj", inter, inter),
    }


def _map_hf_name(name: str, cfg: LlamaConfig) -> tuple[str | None, tuple[int, int] | None]:
    if name.endswith("rotary_emb.inv_freq"):
        return None, None
    if name == "lm_head.weight":
        return (None, None) if cfg.tie_word_embeddings else ("lm_head.weight", None)
    name = name.removeprefix("model.")
    name = name.replace("layernorm.weight", "layernorm").replace("norm.weight", "norm")
    parts = name.split(".")
    shards = _shards(cfg)
    for i, part in enumerate(parts):
        if part in shards:
            fused, start, size = shards[part]
            parts[i] = fused
            return ".".join(parts), (start, size)
    return name, None
