"""Per-request options of an embedding (pooling) request, validated on construction."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class PoolingParams:
    """vLLM's names. `truncate_prompt_tokens`: None = no truncation (an input over the
    model's limit is an error), -1 = truncate to the model's limit, k >= 1 = keep the first k
    tokens (special tokens kept, as sentence-transformers truncates). `normalize`: L2-normalize
    the pooled vector; None = the model's default (for `embed`: whether its sentence-transformers
    modules list `Normalize`)."""

    truncate_prompt_tokens: int | None = None
    normalize: bool | None = None

    def __post_init__(self) -> None:
        t = self.truncate_prompt_tokens
        valid_int = isinstance(t, int) and not isinstance(t, bool) and (t == -1 or t >= 1)
        if t is not None and not valid_int:
            raise ValueError(
                f"truncate_prompt_tokens must be -1 (the model's limit) or at least 1, got {t!r}."
            )
        if self.normalize is not None and not isinstance(self.normalize, bool):
            raise ValueError(f"normalize must be a bool or None, got {self.normalize!r}.")
