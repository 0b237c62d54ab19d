"""How an embedding model pools, read from its sentence-transformers files.

modules.json lists the pipeline: Transformer, then Pooling (its folder's config.json names the
mode), then optionally Normalize (L2). sentence_bert_config.json holds max_seq_length and
do_lower_case. A folder without modules.json pools as vLLM does for a bare encoder: [CLS],
normalized.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hybridllm.json_config import json_object

POOLING_TYPES = ("cls", "mean", "max", "mean_sqrt_len_tokens", "lasttoken")
# sentence-transformers' legacy flags, in its order.
_LEGACY_FLAGS = {
    "pooling_mode_cls_token": "cls",
    "pooling_mode_max_tokens": "max",
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens": "weightedmean",
    "pooling_mode_lasttoken": "lasttoken",
}
_MODULES = "sentence_transformers.models."


@dataclass(frozen=True)
class PoolerConfig:
    pooling_type: str  # one of POOLING_TYPES
    normalize: bool  # the default of PoolingParams.normalize for embed
    max_seq_length: int | None  # sentence-transformers' input limit (tokens, specials included)
    do_lower_case: bool = False
    # vLLM's --pooler-config: inputs longer than max_model_len pooled in chunks of it (the
    # API core cuts them and averages the chunks), and the longest input taken (None: any).
    enable_chunked_processing: bool = False
    max_embed_len: int | None = None

    @classmethod
    def from_folder(cls, folder: str | Path) -> PoolerConfig:
        folder = Path(folder)
        modules_path = folder / "modules.json"
        if not modules_path.exists():
            return cls("cls", True, None)
        modules = json.loads(modules_path.read_text())
        pooling_type, normalize = "mean", False
        for module in modules:
            kind = module.get("type", "").removeprefix(_MODULES)
            kind = kind.rsplit(".", 1)[-1]  # newer releases moved the classes
            if kind == "Pooling":
                pooling_type = _pooling_type(folder / module.get("path", "") / "config.json")
            elif kind == "Normalize":
                normalize = True
            elif kind != "Transformer":
                raise ValueError(
                    f"sentence-transformers module {module.get('type')} is not supported "
                    "(Transformer, Pooling, Normalize)"
                )
        st_path = folder / "sentence_bert_config.json"
        st = json.loads(st_path.read_text()) if st_path.exists() else {}
        return cls(
            pooling_type, normalize, st.get("max_seq_length"), bool(st.get("do_lower_case"))
        )


    def with_overrides(self, value: dict[str, Any] | str) -> PoolerConfig:
        """vLLM's --pooler-config (a JSON object) over the folder's own settings."""
        value = json_object(value, "pooler_config", _OVERRIDES)
        changes: dict[str, Any] = {}
        pooling_type = value.get("pooling_type")
        if pooling_type is not None and str(pooling_type).lower() != "auto":
            if pooling_type not in VLLM_POOLING_TYPES:
                raise ValueError(f"pooler_config.pooling_type must be one of "
                                 f"{', '.join(['auto', *VLLM_POOLING_TYPES])}; "
                                 f"got {pooling_type!r}")
            changes["pooling_type"] = VLLM_POOLING_TYPES[pooling_type]
        for name in ("normalize", "enable_chunked_processing"):
            flag = value.get(name)
            if flag is not None:
                if not isinstance(flag, bool):
                    raise ValueError(f"pooler_config.{name} must be true or false; got {flag!r}")
                changes[name] = flag
        limit = value.get("max_embed_len")
        if limit is not None:
            if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
                raise ValueError("pooler_config.max_embed_len must be an integer of at least "
                                 f"1; got {limit!r}")
            changes["max_embed_len"] = limit
        return dataclasses.replace(self, **changes)


# vLLM's PoolingType names for the modes pooled here (ALL and STEP return per-token data).
VLLM_POOLING_TYPES = {"MEAN": "mean", "CLS": "cls", "LAST": "lasttoken"}
_OVERRIDES = ("pooling_type", "normalize", "enable_chunked_processing", "max_embed_len")


def _pooling_type(path: Path) -> str:
    raw = json.loads(path.read_text()) if path.exists() else {}
    mode = raw.get("pooling_mode")
    if mode is None:
        modes = [m for key, m in _LEGACY_FLAGS.items() if raw.get(key)]
        mode = modes if len(modes) > 1 else (modes[0] if modes else "mean")
    if isinstance(mode, list):
        mode = mode[0] if len(mode) == 1 else mode
    if not isinstance(mode, str) or mode not in POOLING_TYPES:
        raise ValueError(
            f"pooling mode {mode!r} in {path} is not supported ({', '.join(POOLING_TYPES)})"
        )
    return mode
