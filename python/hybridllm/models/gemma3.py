"""Gemma 3 text decoder (Gemma3ForCausalLM, model_type gemma3_text) over the paged KV cache.

The Llama layout with these differences:
- RMSNorm gains are 1 + weight (models/layers.gemma_rms_norm), four per layer: before and
  after attention, before and after the MLP; the post-norms apply to the sublayer's output
  before it joins the residual stream.
- Embeddings are multiplied by sqrt(hidden_size), rounded to the embedding dtype.
- The MLP is gated GELU (tanh approximation).
- q / k are RMS-normalized per head (Gemma norms) before RoPE; scores are scaled by
  query_pre_attn_scalar ** -0.5, not head_dim ** -0.5.
- Layers are local (a sliding window, RoPE base rope_local_base_freq) or global (full
  attention, RoPE base rope_theta with rope_scaling if any), per layer_types or, in older
  configs, every sliding_window_pattern-th layer global.
- The LM head is tied; logits may be soft-capped (cap * tanh(logits / cap)).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from hybridllm.attention import AttentionBackend
from hybridllm.distributed.parallel_state import SINGLE, TensorParallelGroup
from hybridllm.models import layers
from hybridllm.models.config import LlamaConfig
from hybridllm.models.layers import LayerOps
from hybridllm.models.llama import LlamaAttention, LlamaForCausalLM
from hybridllm.step_types import AttentionMetadata


@dataclass(frozen=True)
class Gemma3Config(LlamaConfig):
    query_pre_attn_scalar: float = 256.0
    rope_local_theta: float = 10000.0
    final_logit_softcapping: float | None = None
    attn_logit_softcapping: float | None = None
    # Per layer: True for a local (sliding-window) layer.
    local_layers: tuple[bool, ...] = ()

    def verify(self, max_model_len: int) -> None:
        if self.attn_logit_softcapping is not None:
            raise ValueError(
                f"{self.architecture}: attn_logit_softcapping is not supported by the "
                "attention kernels here"
            )

    @classmethod
    def from_folder(cls, folder: str | Path, architecture: str | None = None) -> Gemma3Config:
        raw = json.loads((Path(folder) / "config.json").read_text())
        # Everything but RoPE and the layer kinds reads as for Llama; those two are Gemma's.
        base = LlamaConfig.from_folder(folder, architecture)
        n = raw["num_hidden_layers"]
        kinds = raw.get("layer_types")
        if kinds is None:
            pattern = int(raw.get("sliding_window_pattern", raw.get("_sliding_window_pattern", 6)))
            kinds = [
                "full_attention" if (i + 1) % pattern == 0 else "sliding_attention"
                for i in range(n)
            ]
        local = tuple(kind == "sliding_attention" for kind in kinds)
        window = raw.get("sliding_window")
        windows = tuple(int(window) if is_local and window else None for is_local in local)
        theta, scaling, local_theta = _rope(raw)
        eos = base.eos_token_ids or ((raw["eos_token_id"],) if "eos_token_id" in raw else ())
        return cls(
            **{
                **{f.name: getattr(base, f.name) for f in dataclasses.fields(LlamaConfig)},
                "rope_theta": theta,
                "rope_scaling": scaling,
                "tie_word_embeddings": raw.get("tie_word_embeddings", True),
                "sliding_window": int(window) if window and any(local) else None,
                "layer_windows": windows if any(w is not None for w in windows) else (),
                "eos_token_ids": eos,
            },
            query_pre_attn_scalar=float(raw.get("query_pre_attn_scalar", 256)),
            rope_local_theta=local_theta,
            final_logit_softcapping=raw.get("final_logit_softcapping"),
            attn_logit_softcapping=raw.get("attn_logit_softcapping"),
            local_layers=local,
        )


def _rope(raw: dict) -> tuple[float, dict | None, float]:
    """(global theta, global scaling, local theta). transformers 5 writes rope_parameters
    keyed by layer kind; older configs rope_theta, rope_scaling and rope_local_base_freq."""
    params = raw.get("rope_parameters")
    if params and "full_attention" in params:
        full = dict(params["full_attention"])
        theta = float(full.pop("rope_theta", 1e6))
        scaling = full if full.get("rope_type", "default") != "default" else None
        local = dict(params.get("sliding_attention") or {})
        return theta, scaling, float(local.get("rope_theta", 10000.0))
    scaling = raw.get("rope_scaling")
    if scaling and (scaling.get("rope_type") or scaling.get("type")) == "default":
        scaling = None
    return (
        float(raw.get("rope_theta", 1e6)),
        scaling or None,
        float(raw.get("rope_local_base_freq", 10000.0)),
    )


class Gemma3Attention(LlamaAttention):
    def __init__(self, cfg: Gemma3Config, tp: TensorParallelGroup) -> None:
        super().__init__(cfg, tp, qkv_bias=cfg.attention_bias, o_bias=cfg.attention_bias)
        self.eps = cfg.rms_norm_eps
        self.scale = cfg.query_pre_attn_scalar**-0.5
        self.q_norm = nn.Parameter(torch.zeros(cfg.head_dim))
        self.k_norm = nn.Parameter(torch.zeros(cfg.head_dim))

    def checkpoint_names(self) -> set[str]:
        return super().checkpoint_names() | {"q_norm.weight", "k_norm.weight"}

    def before_rotary(
        self, q: torch.Tensor, k: torch.Tensor, ops: LayerOps
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return (
            layers.gemma_rms_norm(q, self.q_norm, self.eps),
            layers.gemma_rms_norm(k, self.k_norm, self.eps),
        )


class Gemma3MLP(nn.Module):
    def __init__(self, cfg: Gemma3Config, tp: TensorParallelGroup = SINGLE) -> None:
        super().__init__()
        self.tp = tp
        inter = tp.shard(cfg.intermediate_size, "intermediate_size")
        self.gate_up_proj = nn.Linear(cfg.hidden_size, 2 * inter, bias=False)
        self.down_proj = nn.Linear(inter, cfg.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.tp.all_reduce(self.down_proj(layers.gelu_tanh_and_mul(self.gate_up_proj(x))))


# The four norms of a layer, as named in checkpoints (stored as offsets from a gain of 1).
_LAYER_NORMS = (
    "input_layernorm",
    "post_attention_layernorm",
    "pre_feedforward_layernorm",
    "post_feedforward_layernorm",
)


class Gemma3DecoderLayer(nn.Module):
    def __init__(self, cfg: Gemma3Config, tp: TensorParallelGroup = SINGLE) -> None:
        super().__init__()
        self.eps = cfg.rms_norm_eps
        self.self_attn = Gemma3Attention(cfg, tp)
        self.mlp = Gemma3MLP(cfg, tp)
        for name in _LAYER_NORMS:
            setattr(self, name, nn.Parameter(torch.zeros(cfg.hidden_size)))

    def forward(
        self,
        x: torch.Tensor,
        positions: torch.Tensor,
        cos_sin: torch.Tensor,
        kv_cache: torch.Tensor,
        meta: AttentionMetadata,
        backend: AttentionBackend,
        ops: LayerOps,
        keep: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """keep: as in LlamaDecoderLayer."""
        norm, eps = layers.gemma_rms_norm, self.eps
        h = norm(x, self.input_layernorm, eps)
        h = self.self_attn(h, positions, cos_sin, kv_cache, meta, backend, ops)
        if keep is not None:
            h, x = h.index_select(0, keep), x.index_select(0, keep)
        x = x + norm(h, self.post_attention_layernorm, eps)
        h = self.mlp(norm(x, self.pre_feedforward_layernorm, eps))
        return x + norm(h, self.post_feedforward_layernorm, eps)


class Gemma3ForCausalLM(LlamaForCausalLM):
    config_class = Gemma3Config

    def __init__(
        self, cfg: Gemma3Config, max_positions: int, tp: TensorParallelGroup = SINGLE
    ) -> None:
        super().__init__(cfg, max_positions, tp)
        self.cfg: Gemma3Config = cfg
        self.norm = nn.Parameter(torch.zeros(cfg.hidden_size))
        # Row 0: the global layers' RoPE table, row 1: the local layers' (one buffer, so the
        # loader's keep-RoPE-in-fp32 step covers both).
        local = layers.rope_cos_sin(cfg.head_dim, max_positions, cfg.rope_local_theta, None)
        self.cos_sin = torch.stack([self.cos_sin, local.to(self.cos_sin.device)])

    def make_layer(self, cfg: LlamaConfig, tp: TensorParallelGroup) -> nn.Module:
        assert isinstance(cfg, Gemma3Config)
        return Gemma3DecoderLayer(cfg, tp)

    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        kv_caches: list[torch.Tensor],
        meta: AttentionMetadata,
        backend: AttentionBackend,
        keep: torch.Tensor | None = None,
    ) -> torch.Tensor:
        # sqrt(hidden) as an fp32 scalar rounded to the embedding dtype, as Gemma does (a
        # Python number then: no tensor made per step, nothing for a CUDA graph to capture).
        dtype = self.embed_tokens.weight.dtype
        scale = float(torch.tensor(self.cfg.hidden_size**0.5, dtype=torch.float32).to(dtype))
        x = self.embed_tokens(input_ids) * scale
        last = len(self.layers) - 1
        for i, (layer, kv_cache, is_local) in enumerate(
            zip(self.layers, kv_caches, self.cfg.local_layers)
        ):
            cos_sin = self.cos_sin[1 if is_local else 0]
            x = layer(x, positions, cos_sin, kv_cache, meta, backend, self.ops,
                      keep if i == last else None)
        return layers.gemma_rms_norm(x, self.norm, self.cfg.rms_norm_eps)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        logits = super().compute_logits(hidden)
        cap = self.cfg.final_logit_softcapping
        if cap is not None:
            logits = torch.tanh(logits / cap) * cap
        return logits

    def _checkpoint_names(self) -> set[str]:
        names = super()._checkpoint_names()
        for i in range(len(self.layers)):
            names |= {f"model.layers.{i}.{n}.weight" for n in _LAYER_NORMS}
        return names
