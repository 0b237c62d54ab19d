"""vLLM's `bad_words` as token ids: each word as it would be tokenized at the start of the
text and after a space, since BPE vocabularies spell the two differently ("Hello" vs
" Hello"). The space form is kept only when it is another token sequence of the same length
(vLLM's rule), so a word the tokenizer splits differently after a space bans nothing extra.
"""

from __future__ import annotations

from typing import Any


def bad_words_token_ids(tokenizer: Any, words: list[str]) -> list[list[int]]:
    out: list[list[int]] = []
    for word in words:
        bare = word.lstrip()
        plain = tokenizer.encode(bare, add_special_tokens=False).ids
        if not plain:
            continue  # nothing but whitespace: nothing to ban
        out.append(plain)
        spaced = tokenizer.encode(" " + bare, add_special_tokens=False).ids
        if spaced and spaced[0] != plain[0] and len(spaced) == len(plain):
            out.append(spaced)
    return out

