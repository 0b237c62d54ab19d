"""What a model folder is for: generating text or embedding it.

The worker reports this in GetModelInfo (ModelInfo.Kind GENERATE / EMBED) and the offline LLM
picks its engine by it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from hybridllm.models.bert_config import ENCODER_ARCHITECTURES

ModelTask = Literal["generate", "embed"]


def get_model_task(folder: str | Path) -> ModelTask:
    """embed for a sentence-transformers folder (modules.json) or an encoder architecture such
    as BertModel; generate otherwise."""
    folder = Path(folder)
    if (folder / "modules.json").exists():
        return "embed"
    config = folder / "config.json"
    raw = json.loads(config.read_text()) if config.exists() else {}
    arch = (raw.get("architectures") or [""])[0]
    return "embed" if arch in ENCODER_ARCHITECTURES else "generate"
