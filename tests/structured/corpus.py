"""Vendored JSONSchemaBench schemas (see tests/data/jsonschemabench/README.md)."""

from __future__ import annotations

import json
from pathlib import Path

CORPUS_DIR = Path(__file__).resolve().parent.parent / "data" / "jsonschemabench"


def load_corpus() -> list[tuple[str, str, dict]]:
    """Return (subset, id, schema) for every vendored schema, by subset then file order."""
    rows: list[tuple[str, str, dict]] = []
    for path in sorted(CORPUS_DIR.glob("*.jsonl")):
        with path.open(encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    entry = json.loads(line)
                    rows.append((path.stem, entry["id"], entry["schema"]))
    return rows
