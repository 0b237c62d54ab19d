"""The part of a Hugging Face config.json that the Llama family (Llama, Mistral, Qwen2, Qwen3)
needs. Which architectures load is models/registry.py's to say."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from hybridllm.models.registry import architecture_of


@dataclass(frozen=True)
class LlamaConfig:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    rope_scaling: dict | None
    max_position_embeddings: int
    tie_word_embeddings: bool
    attention_bias: bool
    bos_token_id: int | None
    eos_token_ids: tuple[int, ...]
    architecture: str
    # Attention of the last sliding_window keys only (Mistral), in some layer at least; None:
    # every layer attends to the whole context.
    sliding_window: int | None = None
    # Each layer's window (None: full attention); empty when no layer has one.
    layer_windows: tuple[int | None, ...] = ()

    def layer_window(self, layer: int) -> int | None:
        return self.layer_windows[layer] if self.layer_windows else None

    @property
    def max_positions(self) -> int:
        return self.max_position_embeddings

    def verify(self, max_model_len: int) -> None:
        """A window at least max_model_len long never cuts a sequence's context short, so it
        is plain causal attention. Every attention path runs shorter windows, but only the
        architectures in _WINDOWED are checked against transformers with one (Qwen2's
        per-layer windows from max_window_layers are not yet)."""
        if self.architecture in _WINDOWED:
            return
        if self.sliding_window is not None and self.sliding_window < max_model_len:
            raise ValueError(
                f"{self.architecture}: sliding_window ({self.sliding_window}) is smaller than "
                f"max_model_len ({max_model_len}); sliding-window attention is not checked "
                f"for this architecture, so pass --max-model-len {self.sliding_window} or less"
            )

    @classmethod
    def from_folder(cls, folder: str | Path, architecture: str | None = None) -> LlamaConfig:
        """`architecture`: the registry's reading of config.json (by default read here)."""
        raw = json.loads((Path(folder) / "config.json").read_text())
        arch = architecture or architecture_of(raw)
        # transformers 5 folds rope_theta/rope_scaling into rope_parameters.
        rope = dict(raw.get("rope_parameters") or raw.get("rope_scaling") or {})
        theta = float(rope.pop("rope_theta", raw.get("rope_theta", 10000.0)))
        heads = raw["num_attention_heads"]
        eos = raw.get("eos_token_id")
        gen_path = Path(folder) / "generation_config.json"
        if gen_path.exists():
            eos = json.loads(gen_path.read_text()).get("eos_token_id", eos)
        eos_ids = tuple(eos) if isinstance(eos, list) else (() if eos is None else (eos,))
        return cls(
            vocab_size=raw["vocab_size"],
            hidden_size=raw["hidden_size"],
            intermediate_size=raw["intermediate_size"],
            num_hidden_layers=raw["num_hidden_layers"],
            num_attention_heads=heads,
            num_key_value_heads=raw.get("num_key_value_heads", heads),
            head_dim=raw.get("head_dim") or raw["hidden_size"] // heads,
            rms_norm_eps=raw.get("rms_norm_eps", 1e-6),
            rope_theta=theta,
            rope_scaling=rope or None,
            max_position_embeddings=raw.get("max_position_embeddings", 2048),
            tie_word_embeddings=raw.get("tie_word_embeddings", False),
            # Qwen2's q/k/v biases are the architecture's, not the config's (models/qwen2.py).
            attention_bias=bool(raw.get("attention_bias", False)),
            bos_token_id=raw.get("bos_token_id"),
            eos_token_ids=eos_ids,
            architecture=arch,
            sliding_window=_sliding_window(raw),
            layer_windows=_layer_windows(raw),
        )


# Architectures whose sliding windows are served (and parity-tested, tests/models).
_WINDOWED = frozenset({"MistralForCausalLM"})


def _layer_windows(raw: dict) -> tuple[int | None, ...]:
    """Per layer: the window of sliding_attention layers (layer_types, transformers 5), or of
    every layer when the config names no kinds; () when no layer has one."""
    window = _sliding_window(raw)
    if window is None:
        return ()
    kinds = raw.get("layer_types") or ["sliding_attention"] * raw["num_hidden_layers"]
    return tuple(window if kind == "sliding_attention" else None for kind in kinds)


def _sliding_window(raw: dict) -> int | None:
    """The window if any layer uses one. Qwen2 / Qwen3 configs carry a sliding_window they do
    not use (use_sliding_window false); transformers 5 lists each layer's kind in layer_types."""
    window = raw.get("sliding_window")
    if window is None:
        return None
    layer_types = raw.get("layer_types")
    if layer_types is not None:
        return int(window) if "sliding_attention" in layer_types else None
    if raw.get("use_sliding_window") is False:
        return None
    return int(window)
