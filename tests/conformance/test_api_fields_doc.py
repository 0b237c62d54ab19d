"""docs/api_fields.md stays consistent: each request class's counts are its table's rows, and
every row has exactly one verdict."""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).parents[2] / "docs" / "api_fields.md"
VERDICTS = ("honoured", "refused", "ignored", "not applicable")


def _sections() -> dict[str, str]:
    parts = re.split(r"^## ", DOC.read_text(), flags=re.M)[1:]
    return {p.split("\n", 1)[0]: p for p in parts}


def test_counts_are_the_tables_rows() -> None:
    sections = _sections()
    counts = {}
    for line in sections["Counts"].splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if line.startswith("| `"):
            counts[cells[0]] = [int(c) for c in cells[1:]]
    assert len(counts) == 4, counts
    for cls, want in counts.items():
        (title,) = [t for t in sections if t.startswith(cls)]
        rows = [r for r in sections[title].splitlines() if r.startswith("| `")]
        found = [[v for v in VERDICTS if f"**{v}**" in r] for r in rows]
        assert all(len(f) == 1 for f in found), [r for r, f in zip(rows, found) if len(f) != 1]
        got = [sum(f == [v] for f in found) for v in VERDICTS] + [len(rows)]
        assert got == want, (cls, dict(zip([*VERDICTS, "rows"], got)))
