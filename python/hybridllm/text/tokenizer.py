"""The model's tokenizer.json through the `tokenizers` package (what the engine encodes with),
and its special tokens and chat template. Decoding for text goes through the API core's
tokenizer (`hybridllm._api.Tokenizer`: the decode rules both frontends share)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from tokenizers import Tokenizer as HfTokenizer


@dataclass
class TokenizerInfo:
    bos_token: str | None
    eos_token: str | None
    chat_template: str | None


def _token_text(value: object) -> str | None:
    if isinstance(value, dict):
        return value.get("content")
    return value if isinstance(value, str) else None


def load_tokenizer(folder: str | Path) -> tuple[HfTokenizer, TokenizerInfo]:
    folder = Path(folder)
    tokenizer = HfTokenizer.from_file(str(folder / "tokenizer.json"))
    # Some files (sentence-transformers') carry fixed padding and a truncation length: the
    # engine applies the model's own limits instead, and never pads.
    tokenizer.no_padding()
    tokenizer.no_truncation()
    cfg_path = folder / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text()) if cfg_path.exists() else {}
    template = cfg.get("chat_template")
    jinja = folder / "chat_template.jinja"
    if template is None and jinja.exists():
        template = jinja.read_text()
    if isinstance(template, list):  # named templates: take the default one
        named = {t["name"]: t["template"] for t in template}
        template = named.get("default") or next(iter(named.values()), None)
    info = TokenizerInfo(
        bos_token=_token_text(cfg.get("bos_token")),
        eos_token=_token_text(cfg.get("eos_token")),
        chat_template=template,
    )
    return tokenizer, info
