"""Synthetic prompts of a given token length, built with a local tokenizer (no hub)."""

from __future__ import annotations

import random
from pathlib import Path


def load_tokenizer(path: str | None):  # -> tokenizers.Tokenizer
    """A tokenizer.json, or a model folder holding one; default the bundled model's folder."""
    from tokenizers import Tokenizer

    if path is None:
        from hybridllm.models.resolve import resolve_model

        path = str(resolve_model(None))
    p = Path(path)
    if p.is_dir():
        p = p / "tokenizer.json"
    if not p.is_file():
        raise SystemExit(f"bench: no tokenizer.json at {p}")
    return Tokenizer.from_file(str(p))


def random_prompts(tokenizer, n: int, input_len: int, seed: int) -> list[str]:
    """n different prompts that each encode to about input_len tokens: random ordinary token
    ids, decoded, re-encoded and cut to length (decoding can merge or split tokens)."""
    rng = random.Random(seed)
    vocab = tokenizer.get_vocab_size()
    special = {i for t, i in tokenizer.get_vocab().items() if t.startswith("<") and t.endswith(">")}
    low = max(special, default=0) + 1 if len(special) < vocab // 2 else 0
    prompts = []
    for _ in range(n):
        ids = [rng.randrange(low, vocab) for _ in range(input_len)]
        for _ in range(4):  # converge on the wanted length after the text round trip
            text = tokenizer.decode(ids, skip_special_tokens=True)
            ids = tokenizer.encode(text, add_special_tokens=False).ids
            if len(ids) == input_len:
                break
            if len(ids) > input_len:
                ids = ids[:input_len]
            else:
                ids += [rng.randrange(low, vocab) for _ in range(input_len - len(ids))]
        prompts.append(tokenizer.decode(ids, skip_special_tokens=True))
    return prompts
