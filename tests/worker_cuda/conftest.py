"""Run the Triton kernels on the CPU interpreter when there is no GPU.

TRITON_INTERPRET must be set before triton is first imported, hence here at collection time.
"""

from __future__ import annotations

import os

import pytest
import torch

if "TRITON_INTERPRET" not in os.environ and not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"

HAS_CUDA = torch.cuda.is_available()


@pytest.fixture
def device() -> torch.device:
    return torch.device("cuda" if HAS_CUDA else "cpu")
