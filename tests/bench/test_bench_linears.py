"""`hybridllm bench linears` runs on the bundled model and reports each row count asked for."""

from __future__ import annotations

import json

from hybridllm.cli.main import main


def test_bench_linears(tmp_path, model_path) -> None:
    out = tmp_path / "linears.json"
    assert main(["bench", "linears", "--rows", "1,9", "--passes", "2",
                 "--result-json", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [r["rows"] for r in rows] == [1, 9]
    assert all(r["panels_ms"] > 0 and r["onednn_ms"] > 0 for r in rows)
