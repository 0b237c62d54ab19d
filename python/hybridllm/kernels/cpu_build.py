"""Builds a C++ CPU kernel (kernels/csrc/) with torch's extension tooling, once per source.

One build folder per source *content* (with the headers kernels share, csrc/*.h), compiler
flags and torch version: every checkout of the same source (a fresh clone, a git worktree)
reuses one build instead of compiling again. The source and headers are copied into the folder
so ninja always sees the same paths for them. Where no compiler is available, or
HYBRIDLLM_DISABLE_CPU_KERNELS is set, callers get None and keep their torch path (same
results, slower).
"""

from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path
from types import ModuleType

import torch

logger = logging.getLogger(__name__)
CSRC = Path(__file__).parent / "csrc"
# at::parallel_for spreads work over torch's intra-op threads only where the kernel is compiled
# with OpenMP (else it runs the loop on one thread). Not linked with -fopenmp: the GOMP symbols
# resolve to the OpenMP runtime torch already loaded, so kernels and torch share one pool.
OPENMP = ["-fopenmp"]
# fast-math lets the compiler vectorize exp and reductions (a few ulps of reordering, checked
# against each kernel's reference); infinities keep their meaning.
FAST_MATH = ["-O3", "-march=native", "-ffast-math", "-fno-finite-math-only", *OPENMP]


def build(name: str, source_name: str, cflags: list[str]) -> ModuleType | None:
    if os.environ.get("HYBRIDLLM_DISABLE_CPU_KERNELS"):
        return None
    from hybridllm.paths import cache_dir

    source_path = CSRC / source_name
    # The source and the headers every kernel may include (csrc/*.h), by content.
    files = {p.name: p.read_bytes() for p in [source_path, *sorted(CSRC.glob("*.h"))]}
    tag = hashlib.sha1(torch.__version__.encode() + " ".join(cflags).encode())
    for fname, code in files.items():
        tag.update(fname.encode() + b"\0" + code)
    folder = cache_dir() / "torch_extensions" / f"{source_path.stem}-{tag.hexdigest()[:12]}"
    folder.mkdir(parents=True, exist_ok=True)
    for fname, code in files.items():
        dest = folder / fname
        if not dest.exists() or dest.read_bytes() != code:
            tmp = folder / f".{fname}.{os.getpid()}"
            tmp.write_bytes(code)
            tmp.replace(dest)
    source = folder / source_name
    try:
        import ninja  # the build tool torch drives; its PyPI package ships the binary
        from torch.utils.cpp_extension import load as load_extension

        if ninja.BIN_DIR not in os.environ.get("PATH", "").split(os.pathsep):
            os.environ["PATH"] = ninja.BIN_DIR + os.pathsep + os.environ.get("PATH", "")

        return load_extension(
            name=name, sources=[str(source)], extra_cflags=cflags, build_directory=str(folder),
            verbose=False,
        )
    except Exception as e:  # noqa: BLE001 - any build failure means "use the torch path"
        logger.warning("CPU kernel %s unavailable (%s); using the torch path", source_name, e)
        return None
