"""The part of a Hugging Face config.json that a BERT-family encoder needs."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

# Encoder architectures this package runs; RoBERTa's positions start after the padding id.
ENCODER_ARCHITECTURES = {
    "BertModel", "BertForMaskedLM", "RobertaModel", "RobertaForMaskedLM", "XLMRobertaModel",
}
_ROBERTA_FAMILY = {"roberta", "xlm-roberta", "camembert"}
HIDDEN_ACTS = ("gelu", "gelu_new", "gelu_pytorch_tanh", "relu")


@dataclass(frozen=True)
class BertConfig:
    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    intermediate_size: int
    hidden_act: str
    max_position_embeddings: int
    type_vocab_size: int
    layer_norm_eps: float
    position_offset: int  # position id of the first token (RoBERTa: pad_token_id + 1)
    architecture: str

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def max_positions(self) -> int:
        """The longest input the position table allows."""
        return self.max_position_embeddings - self.position_offset

    @classmethod
    def from_folder(cls, folder: str | Path) -> BertConfig:
        raw = json.loads((Path(folder) / "config.json").read_text())
        arch = (raw.get("architectures") or ["BertModel"])[0]
        model_type = raw.get("model_type", "bert")
        if arch not in ENCODER_ARCHITECTURES and model_type not in {"bert", *_ROBERTA_FAMILY}:
            raise ValueError(
                f"architecture {arch} is not a supported encoder (supported: "
                f"{', '.join(sorted(ENCODER_ARCHITECTURES))})"
            )
        act = raw.get("hidden_act", "gelu")
        if act not in HIDDEN_ACTS:
            raise ValueError(f"hidden_act {act!r} is not supported ({', '.join(HIDDEN_ACTS)})")
        pos_type = raw.get("position_embedding_type", "absolute")
        if pos_type != "absolute":
            raise ValueError(f"position_embedding_type {pos_type!r} is not supported (absolute)")
        roberta = model_type in _ROBERTA_FAMILY or arch.startswith(("Roberta", "XLMRoberta"))
        return cls(
            vocab_size=raw["vocab_size"],
            hidden_size=raw["hidden_size"],
            num_hidden_layers=raw["num_hidden_layers"],
            num_attention_heads=raw["num_attention_heads"],
            intermediate_size=raw["intermediate_size"],
            hidden_act=act,
            max_position_embeddings=raw.get("max_position_embeddings", 512),
            type_vocab_size=raw.get("type_vocab_size", 2),
            layer_norm_eps=raw.get("layer_norm_eps", 1e-12),
            position_offset=raw.get("pad_token_id", 1) + 1 if roberta else 0,
            architecture=arch,
        )
