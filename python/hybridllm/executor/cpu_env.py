"""Process settings that matter when the model runs on the CPU."""

from __future__ import annotations

import ctypes

_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD = -1, -2, -3


def keep_freed_memory() -> None:
    """Serve each step's large temporaries from the heap instead of fresh mappings.

    By default glibc maps big allocations anew and hands freed ones back to the OS, so every
    step's multi-megabyte activations cost page faults again. Raising the mmap and trim
    thresholds keeps that memory in the process for reuse. Process-wide, and harmless where
    glibc is absent (the call is skipped).
    """
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return
    libc.mallopt(_M_MMAP_THRESHOLD, 32 << 20)  # glibc's maximum
    libc.mallopt(_M_TRIM_THRESHOLD, 1 << 30)
    libc.mallopt(_M_TOP_PAD, 64 << 20)
