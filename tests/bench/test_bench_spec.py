"""`hybridllm bench spec --quick` (what CI runs) completes and reports every case."""

from __future__ import annotations

import json

from hybridllm.cli.main import main


def test_bench_spec_quick(tmp_path, model_path) -> None:
    out = tmp_path / "spec.json"
    assert main(["bench", "spec", "--quick", "--result-json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert set(result["cases"]) == {"copy, batch 1", "random, batch 1", "random, batch 2"}
    copy = result["cases"]["copy, batch 1"]
    assert copy["on"]["num_drafts"] > 0 and copy["off"]["num_drafts"] == 0
    assert copy["on"]["tokens"] == copy["off"]["tokens"]  # greedy: same output either way
