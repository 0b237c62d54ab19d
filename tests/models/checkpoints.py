"""Tiny random-weight checkpoints of the non-Llama architectures, written by transformers.

Each is 2 layers of hidden size 64 with 4 attention heads over 2 KV heads, the bundled model's
tokenizer copied in (so the vocabulary is its 49,152 and prompts encode as everywhere else).
Random models have near-flat logits with transformers' default init (std 0.02), so weights are
drawn with std 0.3 and the 1-D weights (norm gains, biases, zero or one at init) are jittered
too: every tensor the loader maps then matters to the tokens, and greedy argmax is decisive.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import torch

ARCHS = ("qwen2", "qwen3", "mistral", "mistral-window", "gemma3")
VOCAB = 49152
EOS = 2  # the bundled tokenizer's

_COMMON: dict[str, Any] = dict(
    vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
    initializer_range=0.3, rms_norm_eps=1e-6, bos_token_id=1, eos_token_id=EOS,
    pad_token_id=EOS,
)
_EXTRA: dict[str, dict[str, Any]] = {
    # Biases on q / k / v (implied by the architecture); a tied LM head.
    "qwen2": dict(tie_word_embeddings=True),
    # head_dim given, unlike hidden / heads (16); q / k norms; untied head.
    "qwen3": dict(head_dim=32, rope_theta=1e6, tie_word_embeddings=False),
    # A window as long as the positions: plain causal attention at any served length.
    "mistral": dict(sliding_window=512, tie_word_embeddings=False),
    # A window shorter than the generations and the resumed prompts, not a multiple of the
    # block size (16): every attention path drops old keys mid-block.
    "mistral-window": dict(sliding_window=24, tie_word_embeddings=False),
    # Gemma 3 text: a local layer (window 20, RoPE base 10^4) then a global one (base 10^6,
    # linear scaling); head_dim 32 with query_pre_attn_scalar 24 (so the score scale is not
    # head_dim's); soft-capped logits; tied head.
    "gemma3": dict(
        head_dim=32, query_pre_attn_scalar=24, sliding_window=20,
        layer_types=["sliding_attention", "full_attention"],
        rope_parameters={
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
            "full_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e6},
        },
        final_logit_softcapping=30.0, tie_word_embeddings=True,
    ),
}
# The transformers config class of each entry above.
_CLASS = {"qwen2": "Qwen2Config", "qwen3": "Qwen3Config", "mistral": "MistralConfig",
          "mistral-window": "MistralConfig", "gemma3": "Gemma3TextConfig"}


def hf_config(arch: str, **overrides: Any) -> Any:
    import transformers

    cls = getattr(transformers, _CLASS[arch])
    return cls(**{**_COMMON, **_EXTRA[arch], **overrides})


def copy_tokenizer(source: Path, folder: Path) -> None:
    for f in source.iterdir():
        if f.name.startswith("tokenizer") or f.name == "special_tokens_map.json":
            shutil.copy(f, folder / f.name)


def make_checkpoint(arch: str, folder: Path, tokenizer_source: Path, seed: int = 0,
                    **overrides: Any) -> Any:
    """Writes config.json, generation_config.json, model.safetensors and the tokenizer into
    `folder`; returns transformers' fp32 model of those weights (eval mode)."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(hf_config(arch, **overrides), dtype=torch.float32)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if param.dim() == 1:
                base = 1.0 if "norm" in name else 0.0
                param.copy_(base + 0.2 * torch.randn_like(param))
    model.eval()
    model.save_pretrained(folder)  # safetensors
    copy_tokenizer(tokenizer_source, folder)
    return model
