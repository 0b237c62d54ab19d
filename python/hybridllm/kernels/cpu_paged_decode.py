"""The CPU paged-decode attention kernel (csrc/paged_decode_cpu.cpp), built on first use.

Compiled once with torch's C++ extension tooling into a cache folder; where no compiler is
available the torch backend keeps its gather-based path (same results, slower).
"""

from __future__ import annotations

import hashlib
import logging
import os
from functools import lru_cache
from pathlib import Path
from types import ModuleType

import torch

logger = logging.getLogger(__name__)
_SOURCE = Path(__file__).parent / "csrc" / "paged_decode_cpu.cpp"


@lru_cache(maxsize=1)
def load() -> ModuleType | None:
    if os.environ.get("HYBRIDLLM_DISABLE_CPU_KERNELS"):
        return None
    from hybridllm.paths import cache_dir

    # One build folder per source *content* (and torch version): every checkout of the same
    # source (a fresh clone, a git worktree) reuses one build instead of compiling again. The
    # source is copied into the folder so ninja always sees the same path for it.
    cflags = ["-O3", "-march=native", "-ffast-math", "-fno-finite-math-only"]
    code = _SOURCE.read_bytes()
    tag = hashlib.sha1(code + torch.__version__.encode() + " ".join(cflags).encode())
    build = cache_dir() / "torch_extensions" / f"paged_decode_cpu-{tag.hexdigest()[:12]}"
    build.mkdir(parents=True, exist_ok=True)
    source = build / _SOURCE.name
    if not source.exists() or source.read_bytes() != code:
        tmp = build / f".{_SOURCE.name}.{os.getpid()}"
        tmp.write_bytes(code)
        tmp.replace(source)
    try:
        import ninja  # the build tool torch drives; its PyPI package ships the binary
        from torch.utils.cpp_extension import load as load_extension

        if ninja.BIN_DIR not in os.environ.get("PATH", "").split(os.pathsep):
            os.environ["PATH"] = ninja.BIN_DIR + os.pathsep + os.environ.get("PATH", "")

        return load_extension(
            name="hybridllm_paged_decode_cpu",
            sources=[str(source)],
            # fast-math lets the compiler vectorize exp and the reductions (a few ulps of
            # reordering, checked against the reference); infinities keep their meaning.
            extra_cflags=cflags,
            build_directory=str(build),
            verbose=False,
        )
    except Exception as e:  # noqa: BLE001 - any build failure means "use the torch path"
        logger.warning("CPU paged-decode kernel unavailable (%s); using the gather path", e)
        return None


def paged_decode(
    query: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
    window: int | None = None,
) -> torch.Tensor:
    """query [b, H, D]; caches [blocks, block_size, Hkv, D]; block_tables [b, n] int32;
    window: each query sees its sequence's last `window` keys only (None: all)."""
    module = load()
    assert module is not None
    return module.paged_decode(
        query, key_cache, value_cache, block_tables, seq_lens, scale, window or 0
    )
