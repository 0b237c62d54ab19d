"""Convert a llama.cpp GGUF checkpoint into a Hugging Face model folder, once.

Weights are dequantized with the `gguf` package; config, tokenizer and chat template are
recovered from the GGUF metadata by transformers. llama.cpp stores Llama's attn_q/attn_k rows
permuted for its interleaved RoPE, so they are permuted back to the Hugging Face (rotate-half)
layout.

Gemma 3 (general.architecture gemma3): its own tensor names; no RoPE permutation (llama.cpp
runs Gemma with rotate-half RoPE); and every norm weight is stored as the gain 1 + w, where
Hugging Face checkpoints hold w, so 1 is subtracted (checked on the bundled 270M: with the
subtraction perplexity on plain English is ~9, without it ~10^8). Its GGUF carries no chat
template, so Google's published Gemma 3 template (chat_templates.GEMMA3_CHAT_TEMPLATE) is
written.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from pathlib import Path

import numpy as np
import torch
from gguf import GGUFReader
from gguf.quants import dequantize
from safetensors.torch import save_file
from tqdm import tqdm

from hybridllm.models.chat_templates import GEMMA3_CHAT_TEMPLATE, GEMMA_END_OF_TURN

# GGUF tensor name (with the layer index as {i}) -> Hugging Face Llama parameter name.
_NAME_MAP = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
    "blk.{i}.attn_norm.weight": "model.layers.{i}.input_layernorm.weight",
    "blk.{i}.ffn_norm.weight": "model.layers.{i}.post_attention_layernorm.weight",
    "blk.{i}.attn_q.weight": "model.layers.{i}.self_attn.q_proj.weight",
    "blk.{i}.attn_k.weight": "model.layers.{i}.self_attn.k_proj.weight",
    "blk.{i}.attn_v.weight": "model.layers.{i}.self_attn.v_proj.weight",
    "blk.{i}.attn_output.weight": "model.layers.{i}.self_attn.o_proj.weight",
    "blk.{i}.ffn_gate.weight": "model.layers.{i}.mlp.gate_proj.weight",
    "blk.{i}.ffn_up.weight": "model.layers.{i}.mlp.up_proj.weight",
    "blk.{i}.ffn_down.weight": "model.layers.{i}.mlp.down_proj.weight",
}


# Gemma 3's names where they differ from Llama's (its ffn_norm is the pre-MLP norm).
_GEMMA3_NAME_MAP = {
    **_NAME_MAP,
    "blk.{i}.ffn_norm.weight": "model.layers.{i}.pre_feedforward_layernorm.weight",
    "blk.{i}.post_attention_norm.weight": "model.layers.{i}.post_attention_layernorm.weight",
    "blk.{i}.post_ffw_norm.weight": "model.layers.{i}.post_feedforward_layernorm.weight",
    "blk.{i}.attn_q_norm.weight": "model.layers.{i}.self_attn.q_norm.weight",
    "blk.{i}.attn_k_norm.weight": "model.layers.{i}.self_attn.k_norm.weight",
}



def hf_name(gguf_name: str, name_map: dict[str, str] = _NAME_MAP) -> str:
    match = re.match(r"blk\.(\d+)\.(.*)", gguf_name)
    if match is None:
        return name_map[gguf_name]
    layer, rest = match.groups()
    return name_map["blk.{i}." + rest].format(i=layer)


def unpermute_rope(weight: torch.Tensor, num_heads: int) -> torch.Tensor:
    """Undo llama.cpp's interleaving of each head's rows (inverse of its `permute`)."""
    out_dim, in_dim = weight.shape
    head_dim = out_dim // num_heads
    return (
        weight.reshape(num_heads, head_dim // 2, 2, in_dim)
        .transpose(1, 2)
        .reshape(out_dim, in_dim)
    )


def read_weights(
    reader: GGUFReader, num_heads: int, num_kv_heads: int, gemma: bool = False
) -> dict[str, torch.Tensor]:
    """gemma: Gemma 3's names and norm offsets, no RoPE un-permutation."""
    weights: dict[str, torch.Tensor] = {}
    # disable=None: a bar on a terminal, quiet in logs and pipes.
    for tensor in tqdm(reader.tensors, desc="Dequantizing GGUF tensors", unit="tensor",
                       disable=None):
        array = dequantize(tensor.data, tensor.tensor_type)
        # GGUF lists dims fastest-first; numpy data is already row-major (out, in).
        shape = tuple(int(d) for d in reversed(tensor.shape))
        value = torch.from_numpy(np.array(array, dtype=np.float32).reshape(shape))
        name = hf_name(tensor.name, _GEMMA3_NAME_MAP if gemma else _NAME_MAP)
        if gemma:
            if name.endswith("norm.weight"):
                value = value - 1.0
        elif name.endswith("q_proj.weight"):
            value = unpermute_rope(value, num_heads)
        elif name.endswith("k_proj.weight"):
            value = unpermute_rope(value, num_kv_heads)
        weights[name] = value.contiguous()
    return weights


def convert_gguf(gguf_path: str | os.PathLike[str], out_dir: str | os.PathLike[str]) -> Path:
    """Write config.json, model.safetensors and the tokenizer files of `gguf_path` to `out_dir`."""
    from transformers import AutoConfig, AutoTokenizer, GenerationConfig

    gguf_path = Path(gguf_path)
    out_dir = Path(out_dir)
    folder, file = str(gguf_path.parent), gguf_path.name
    config = AutoConfig.from_pretrained(folder, gguf_file=file)
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=file)
    reader = GGUFReader(str(gguf_path))
    gemma = _architecture(reader) == "gemma3"
    weights = read_weights(
        reader, config.num_attention_heads, config.num_key_value_heads, gemma=gemma
    )
    if config.tie_word_embeddings:
        weights.pop("lm_head.weight", None)
    eos = config.eos_token_id
    if gemma:
        config.architectures = ["Gemma3ForCausalLM"]
        if not tokenizer.chat_template:
            tokenizer.chat_template = GEMMA3_CHAT_TEMPLATE
        eos = [eos, GEMMA_END_OF_TURN]

    # Write into a temporary sibling and rename, so an interrupted run leaves no half folder.
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=out_dir.name + ".", dir=out_dir.parent))
    tmp.chmod(0o755)
    try:
        config.dtype = "float32"
        config.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        GenerationConfig(
            bos_token_id=config.bos_token_id,
            eos_token_id=eos,
            pad_token_id=getattr(config, "pad_token_id", None),
        ).save_pretrained(tmp)
        save_file(weights, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        _ensure_chat_template_in_tokenizer_config(tmp, tokenizer.chat_template)
        if out_dir.exists():
            shutil.rmtree(out_dir)
        tmp.rename(out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out_dir


def _architecture(reader: GGUFReader) -> str:
    field = reader.fields["general.architecture"]
    return str(field.contents())


def _ensure_chat_template_in_tokenizer_config(folder: Path, template: str | None) -> None:
    """Newer transformers write the template to chat_template.jinja; readers expect it here too."""
    if not template:
        return
    path = folder / "tokenizer_config.json"
    data = json.loads(path.read_text()) if path.exists() else {}
    data["chat_template"] = template
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False))
