"""Huge-page host memory (kernels/cpu_memory): contents, layout, lifetime and, where the
kernel offers transparent huge pages, that the mapping really gets them."""

from __future__ import annotations

import gc
import re
from pathlib import Path

import pytest
import torch

from hybridllm.kernels.cpu_memory import HUGE_PAGE, HugePageArena, huge_page_bytes

THP = Path("/sys/kernel/mm/transparent_hugepage/enabled")


def _thp_offered() -> bool:
    return THP.exists() and re.search(r"\[(always|madvise)\]", THP.read_text()) is not None


def _huge_kb_at(address: int) -> int:
    """AnonHugePages (kB) of the mapping of this process that holds address."""
    inside = False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = re.match(r"^([0-9a-f]+)-([0-9a-f]+) ", line)
        if head:
            inside = int(head[1], 16) <= address < int(head[2], 16)
        elif inside and line.startswith("AnonHugePages:"):
            return int(line.split()[1])
    raise AssertionError(f"no mapping holds {address:#x}")


def test_bytes_are_zero_and_start_on_a_huge_page() -> None:
    t = huge_page_bytes(3 * HUGE_PAGE + 5)
    assert t.dtype == torch.uint8 and t.shape == (3 * HUGE_PAGE + 5,)
    assert t.data_ptr() % HUGE_PAGE == 0
    assert int(t.count_nonzero()) == 0
    t[-1] = 7
    assert int(t.sum()) == 7


@pytest.mark.skipif(not _thp_offered(), reason="this kernel offers no transparent huge pages")
def test_the_mapping_is_in_huge_pages() -> None:
    t = huge_page_bytes(8 * HUGE_PAGE)
    # Faulted in at allocation; khugepaged is not needed. A host short of free 2 MiB pages
    # may still fall back for some, so ask for most of them, not all.
    assert _huge_kb_at(t.data_ptr()) >= 4 * HUGE_PAGE // 1024


def test_arena_hands_out_aligned_views_of_one_mapping() -> None:
    shapes = [(3, 5), (7,), (2, 2, 9)]
    sizes = [HugePageArena.bytes_for(s, torch.bfloat16) for s in shapes]
    assert sizes == [64, 64, 128]  # 30, 14 and 72 bytes, each rounded up to a cache line
    assert HugePageArena.bytes_for((100,), torch.float32) == 448  # 400 rounded to 64
    arena = HugePageArena(sum(sizes) + 448)
    views = [arena.zeros(s, torch.bfloat16) for s in shapes]
    src = torch.arange(100, dtype=torch.float32)
    copy = arena.copy_of(src)
    assert [tuple(v.shape) for v in views] == shapes
    assert all(v.dtype == torch.bfloat16 for v in views)
    assert all(int(v.count_nonzero()) == 0 for v in views)
    assert torch.equal(copy, src) and copy.data_ptr() != src.data_ptr()
    ptrs = [v.data_ptr() for v in views] + [copy.data_ptr()]
    assert ptrs == [ptrs[0] + off for off in (0, 64, 128, 256)]
    views[0].fill_(1)  # no overlap between neighbours
    assert int(views[1].count_nonzero()) == 0 and torch.equal(copy, src)
    with pytest.raises(ValueError, match="64 bytes asked, 0 left"):
        arena.zeros((1,), torch.float32)


def test_a_view_keeps_the_mapping_alive() -> None:
    arena = HugePageArena(HUGE_PAGE)
    view = arena.copy_of(torch.full((1000,), 3.0))
    del arena
    gc.collect()
    assert float(view.sum()) == 3000.0
