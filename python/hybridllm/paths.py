"""Where hybridllm keeps what it builds or converts once (models, compiled kernels)."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    root = os.environ.get("HYBRIDLLM_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "hybridllm"
    )
    return Path(root)
