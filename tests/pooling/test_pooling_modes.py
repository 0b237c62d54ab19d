"""Other BERT-family sentence-transformers folders: tiny random BERT and RoBERTa encoders saved
by transformers, each pooling mode and activation, with and without Normalize, against
sentence-transformers loading the same folder; a bare BertModel folder (no modules.json)
pools [CLS] and normalizes, as vLLM does."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from hybridllm import LLM
from hybridllm.models.pooler_config import PoolerConfig
from hybridllm.models.task import get_model_task
from tests.pooling.corpus import CORPUS

TEXTS = CORPUS[:12] + CORPUS[22:26] + [CORPUS[-2]]
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt",
                   "special_tokens_map.json")


def _tiny_encoder(folder: Path, source: Path, arch: str, act: str) -> None:
    from transformers import BertConfig, BertModel, RobertaConfig, RobertaModel

    shape = dict(vocab_size=30522, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                 intermediate_size=128, hidden_act=act)
    torch.manual_seed(0)
    if arch == "bert":
        model = BertModel(BertConfig(max_position_embeddings=128, **shape))
    else:
        model = RobertaModel(RobertaConfig(max_position_embeddings=130, type_vocab_size=1,
                                           pad_token_id=1, **shape))
    with torch.no_grad():  # spread the weights so the layers really shape the output
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0.0, 0.2)
    model.save_pretrained(folder)
    for name in TOKENIZER_FILES:
        shutil.copy(source / name, folder / name)


def _sentence_transformers_files(folder: Path, mode: str, normalize: bool) -> None:
    kind = "sentence_transformers.models."
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": kind + "Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": kind + "Pooling"},
    ]
    if normalize:
        modules.append({"idx": 2, "name": "2", "path": "2_Normalize", "type": kind + "Normalize"})
    (folder / "modules.json").write_text(json.dumps(modules))
    (folder / "1_Pooling").mkdir()
    flags = {"pooling_mode_cls_token": "cls", "pooling_mode_mean_tokens": "mean",
             "pooling_mode_max_tokens": "max", "pooling_mode_mean_sqrt_len_tokens":
             "mean_sqrt_len_tokens", "pooling_mode_lasttoken": "lasttoken"}
    pooling = {"word_embedding_dimension": 64} | {k: v == mode for k, v in flags.items()}
    (folder / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
    (folder / "sentence_bert_config.json").write_text(
        json.dumps({"max_seq_length": 48, "do_lower_case": False})
    )


CASES = [
    ("bert", "gelu", "cls", True),
    ("bert", "gelu_new", "lasttoken", False),
    ("bert", "relu", "max", True),
    ("roberta", "gelu", "mean", True),
    ("roberta", "gelu", "mean_sqrt_len_tokens", False),
]


@pytest.mark.parametrize(("arch", "act", "mode", "normalize"), CASES)
def test_matches_sentence_transformers(
    tmp_path: Path, embed_model_path: Path, arch: str, act: str, mode: str, normalize: bool
) -> None:
    from sentence_transformers import SentenceTransformer

    _tiny_encoder(tmp_path, embed_model_path, arch, act)
    _sentence_transformers_files(tmp_path, mode, normalize)
    assert get_model_task(tmp_path) == "embed"
    assert PoolerConfig.from_folder(tmp_path) == PoolerConfig(mode, normalize, 48)
    llm = LLM(model=str(tmp_path))
    assert llm.engine.max_model_len == 48
    ours = np.array([o.outputs.embedding for o in llm.embed(TEXTS, truncate_prompt_tokens=-1)])
    ref = SentenceTransformer(str(tmp_path), device="cpu").encode(TEXTS, convert_to_numpy=True)
    assert ours.shape == ref.shape == (len(TEXTS), 64)
    norms = np.linalg.norm(ours, axis=1)
    if normalize:
        np.testing.assert_allclose(norms, 1.0, atol=1e-6)
    else:
        assert np.abs(norms - 1.0).min() > 1e-3
    cosines = (ours * ref).sum(1) / (norms * np.linalg.norm(ref, axis=1))
    assert cosines.min() >= 0.99999
    assert np.abs(ours - ref).max() <= 1e-5 * max(1.0, float(np.abs(ref).max()))


def test_bare_bert_folder_pools_cls_normalized(tmp_path: Path, embed_model_path: Path) -> None:
    from transformers import AutoModel, AutoTokenizer

    _tiny_encoder(tmp_path, embed_model_path, "bert", "gelu")
    assert get_model_task(tmp_path) == "embed"
    assert PoolerConfig.from_folder(tmp_path) == PoolerConfig("cls", True, None)
    llm = LLM(model=str(tmp_path))
    assert llm.engine.max_model_len == 128  # max_position_embeddings: no sentence-bert limit
    outputs = llm.embed(TEXTS[:-1])
    with pytest.raises(ValueError, match=r"maximum of 128 tokens \(max_model_len\)"):
        llm.embed(TEXTS[-1])
    hf = AutoModel.from_pretrained(str(tmp_path), dtype=torch.float32).eval()
    tok = AutoTokenizer.from_pretrained(str(tmp_path))
    for text, out in zip(TEXTS[:-1], outputs):
        ids = tok(text, return_tensors="pt")["input_ids"]
        assert out.prompt_token_ids == ids[0].tolist()
        with torch.inference_mode():
            cls = hf(input_ids=ids).last_hidden_state[0, 0]
        expected = torch.nn.functional.normalize(cls, dim=0)
        assert (torch.tensor(out.outputs.embedding) - expected).abs().max().item() <= 1e-5


def test_model_task(model_path: Path, embed_model_path: Path, tmp_path: Path) -> None:
    assert get_model_task(embed_model_path) == "embed"
    assert get_model_task(model_path) == "generate"
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    assert get_model_task(tmp_path) == "generate"
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["XLMRobertaModel"]}))
    assert get_model_task(tmp_path) == "embed"
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    (tmp_path / "modules.json").write_text("[]")  # a sentence-transformers folder: embed
    assert get_model_task(tmp_path) == "embed"


def test_bundled_names(embed_model_path: Path) -> None:
    from hybridllm.models.resolve import resolve_model

    assert resolve_model("sentence-transformers/all-MiniLM-L6-v2") == embed_model_path
    assert (embed_model_path / "modules.json").exists()
    cfg = PoolerConfig.from_folder(embed_model_path)
    assert cfg == PoolerConfig("mean", True, 256)


def test_unsupported_sentence_transformers_module(tmp_path: Path) -> None:
    (tmp_path / "modules.json").write_text(json.dumps(
        [{"path": "2_Dense", "type": "sentence_transformers.models.Dense"}]
    ))
    with pytest.raises(ValueError, match=r"module sentence_transformers.models.Dense is not "
                       r"supported \(Transformer, Pooling, Normalize\)"):
        PoolerConfig.from_folder(tmp_path)
