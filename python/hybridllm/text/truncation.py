"""Encoder inputs cut to a token limit the way sentence-transformers cuts them: the first
tokens are kept, and so are the special tokens the model adds ([CLS] ... [SEP]).

For text this is transformers' truncation="longest_first" on one sequence, which
sentence-transformers asks for: the content is cut to the limit less the special tokens, then
the post-processor adds them. Token ids come with their special tokens already in place: a
trailing special token ([SEP], </s>) stays last.
"""

from __future__ import annotations

from tokenizers import Tokenizer as HfTokenizer


def num_special_tokens(tokenizer: HfTokenizer) -> int:
    return tokenizer.num_special_tokens_to_add(is_pair=False)


def special_token_ids(tokenizer: HfTokenizer) -> frozenset[int]:
    return frozenset(i for i, t in tokenizer.get_added_tokens_decoder().items() if t.special)


def encode_truncated(tokenizer: HfTokenizer, text: str, max_tokens: int | None) -> list[int]:
    """`text`'s ids with the special tokens, at most `max_tokens` of them (None: all)."""
    ids = tokenizer.encode(text, add_special_tokens=True).ids
    if max_tokens is None or len(ids) <= max_tokens:
        return ids
    room = max_tokens - num_special_tokens(tokenizer)
    if room < 1:
        raise ValueError(
            f"truncate_prompt_tokens ({max_tokens}) must leave room for at least one token "
            f"besides the model's {num_special_tokens(tokenizer)} special tokens."
        )
    content = tokenizer.encode(text, add_special_tokens=False)
    content.truncate(room)
    return tokenizer.post_process(content, add_special_tokens=True).ids


def truncate_ids(ids: list[int], max_tokens: int | None, special: frozenset[int]) -> list[int]:
    """The first `max_tokens` ids, keeping a trailing special token last."""
    if max_tokens is None or len(ids) <= max_tokens:
        return list(ids)
    if ids[-1] in special and max_tokens >= 2:
        return list(ids[: max_tokens - 1]) + [ids[-1]]
    return list(ids[:max_tokens])


def encode_batch_truncated(
    tokenizer: HfTokenizer, texts: list[str], limits: list[int | None],
    add_special_tokens: bool = True,
) -> list[list[int]]:
    """encode_truncated for many texts; one encode_batch call (tokenizers spreads it over the
    cores) and a second pass only for the texts over their limit. Without special tokens the
    first `limit` ids are kept."""
    encodings = tokenizer.encode_batch(texts, add_special_tokens=add_special_tokens)
    out = []
    for text, encoding, limit in zip(texts, encodings, limits):
        ids = encoding.ids
        if limit is None or len(ids) <= limit:
            out.append(ids)
        elif not add_special_tokens:
            out.append(ids[:limit])
        else:
            out.append(encode_truncated(tokenizer, text, limit))
    return out
