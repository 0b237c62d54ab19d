"""Triton kernels for the CUDA path, each beside the torch reference it is tested against.

Importing this package never imports Triton; `triton_usable()` says whether the kernel
modules can run here: Triton importable and either a CUDA device or TRITON_INTERPRET=1
(the CPU interpreter the tests use).
"""

from __future__ import annotations

import functools
import importlib.util
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


# Both paged-attention kernels work in base 2 (exp2) with the softmax scale folded in.
LOG2E = 1.4426950408889634
# The window both pass for full-attention layers: longer than any context, far from int32
# overflow when subtracted from a key position.
NO_WINDOW = 1 << 30


def dot_precision(dtype: torch.dtype) -> str:
    # fp32 inputs would silently run as tf32 on tensor cores; ask for exact fp32 products.
    import torch

    return "ieee" if dtype == torch.float32 else "tf32"


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


@functools.cache
def _triton_importable() -> bool:
    return importlib.util.find_spec("triton") is not None


def triton_usable() -> bool:
    if not _triton_importable():
        return False
    if interpreting():
        return True
    import torch

    return torch.cuda.is_available()


__all__ = ["LOG2E", "NO_WINDOW", "dot_precision", "interpreting", "triton_usable"]
