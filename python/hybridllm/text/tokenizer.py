"""The model's tokenizer.json through the `tokenizers` package, its special tokens, and the
decode rules of rust-frontend/src/text/tokenizer.rs."""

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


@dataclass(frozen=True)
class DecodeOpts:
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True


class Tokenizer:
    """tokenizer.json with the decode rules both frontends share (see decode)."""

    def __init__(self, source: str | Path | HfTokenizer) -> None:
        if isinstance(source, HfTokenizer):
            self.inner = source
        else:
            try:
                self.inner = HfTokenizer.from_file(str(source))
            except Exception as e:  # noqa: BLE001 - the tokenizers error type is not public
                raise RuntimeError(f"cannot load tokenizer {source}: {e}") from e
        # As load_tokenizer: never pad, and no truncation but the limits the server applies.
        self.inner.no_padding()
        self.inner.no_truncation()
        self.added = set(self.inner.get_added_tokens_decoder().keys())

    def encode(self, text: str, add_special_tokens: bool) -> list[int]:
        return self.inner.encode(text, add_special_tokens=add_special_tokens).ids

    def vocab_size(self) -> int:
        return self.inner.get_vocab_size(with_added_tokens=True)

    def _plain(self, ids: list[int], skip: bool) -> str:
        return self.inner.decode(ids, skip_special_tokens=skip)

    def decode(self, ids: list[int], o: DecodeOpts = DecodeOpts()) -> str:
        """Kept special tokens are spaced from their neighbours (transformers' slow rule)."""
        if (
            o.skip_special_tokens
            or not o.spaces_between_special_tokens
            or not any(i in self.added for i in ids)
        ):
            return self._plain(ids, o.skip_special_tokens)
        parts: list[str] = []
        run: list[int] = []
        for i in ids:
            if i in self.added:
                if run:
                    parts.append(self._plain(run, False))
                    run = []
                parts.append(self._plain([i], False))
            else:
                run.append(i)
        if run:
            parts.append(self._plain(run, False))
        return " ".join(parts)

    def token_text(self, token_id: int) -> str:
        return self._plain([token_id], False)
