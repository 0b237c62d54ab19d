"""`hybridllm bench linears` runs on the bundled model and reports each row count asked for."""

from __future__ import annotations

import json

import pytest
import torch

from hybridllm.cli.main import main
from hybridllm.models import cpu_linear


@pytest.mark.parametrize("dtype", [
    "float32",
    # Without oneDNN bf16 for this CPU a bf16 model keeps torch's linears: nothing to race.
    pytest.param("bfloat16", marks=pytest.mark.skipif(
        not cpu_linear.available(torch.bfloat16), reason="no oneDNN bf16 on this CPU")),
])
def test_bench_linears(tmp_path, model_path, dtype: str) -> None:
    out = tmp_path / "linears.json"
    assert main(["bench", "linears", "--rows", "1,9", "--passes", "2", "--dtype", dtype,
                 "--result-json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["dtype"] == dtype
    rows = result["rows"]
    assert [r["rows"] for r in rows] == [1, 9]
    assert all(r["panels_ms"] > 0 and r["onednn_ms"] > 0 for r in rows)
