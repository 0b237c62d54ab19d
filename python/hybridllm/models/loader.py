"""Build a model from a Hugging Face folder: config, empty module, safetensors weights (a
decoder of the class models/registry.py names for its architecture, or a BERT-family encoder
for embeddings)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import torch
from safetensors import safe_open

from hybridllm.distributed.parallel_state import SINGLE, TensorParallelGroup
from hybridllm.models.bert import BertModel
from hybridllm.models.bert_config import BertConfig
from hybridllm.models.interfaces import CausalLM, DecoderConfig
from hybridllm.models.registry import model_class


def iter_safetensors(folder: Path) -> Iterator[tuple[str, torch.Tensor]]:
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no *.safetensors weights in {folder}")
    for file in files:
        with safe_open(str(file), framework="pt") as f:
            for name in f.keys():
                yield name, f.get_tensor(name)


def load_model(
    folder: Path,
    cfg: DecoderConfig,
    dtype: torch.dtype,
    device: torch.device,
    max_positions: int,
    load_format: str = "safetensors",
    tp: TensorParallelGroup = SINGLE,
) -> CausalLM:
    """Under tensor parallelism each rank reads the whole checkpoint and keeps its shard."""
    with torch.device(device):
        model = model_class(cfg.architecture)(cfg, max_positions, tp)
    model.to(dtype=dtype)
    model.cos_sin = model.cos_sin.float()  # RoPE tables stay fp32 whatever the weights' dtype
    if load_format == "dummy":
        _init_dummy(model)
    else:
        model.load_weights(iter_safetensors(folder))
    return model.eval()


def load_encoder(
    folder: Path, cfg: BertConfig, dtype: torch.dtype, device: torch.device,
    load_format: str = "safetensors",
) -> BertModel:
    with torch.device(device):
        model = BertModel(cfg)
    model.to(dtype=dtype)
    if load_format == "dummy":
        _init_dummy(model)
    else:
        model.load_weights(iter_safetensors(folder))
    return model.eval()


def _init_dummy(model: torch.nn.Module) -> None:
    """Small random weights, for speed work on shapes larger than any bundled checkpoint."""
    generator = torch.Generator(device="cpu").manual_seed(0)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name:
                param.fill_(1.0)
            else:
                cpu = torch.empty(param.shape, dtype=torch.float32)
                cpu.uniform_(-0.02, 0.02, generator=generator)
                param.copy_(cpu.to(param.dtype))
