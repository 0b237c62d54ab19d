"""docs/grafana/hybridllm.json against what `hybridllm serve --rust-frontend` exports: every
series a panel queries exists on /metrics (suffixes and `by` labels included), and every
exported hybridllm metric has a panel. The server speculates (n-gram), so the speculative
decoding families, the per-position one included, are there too. The conformance suite checks
that both frontends export the same names."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.conftest import API_KEY
from tests.launch import Server, start, stop

DASHBOARD = Path(__file__).parents[2] / "docs" / "grafana" / "hybridllm.json"
SERIES = re.compile(r"\b(hybridllm:[a-z0-9_]+)")
BY = re.compile(r"\bby \(([a-z_, ]+)\)")


@pytest.fixture(scope="module")
def exported(model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """Exported series name -> its label names, after a request (so labelled series exist)."""
    srv: Server = start("rust", tmp_path_factory.mktemp("grafana"), "--max-model-len", "512",
                        "--api-key", API_KEY, "--speculative-config",
                        '{"method": "ngram", "num_speculative_tokens": 3}')
    try:
        auth = {"Authorization": f"Bearer {API_KEY}"}
        r = httpx.post(srv.url + "/v1/completions", headers=auth, timeout=60,
                       json={"prompt": "Hi", "max_tokens": 2})
        assert r.status_code == 200, r.text
        text = httpx.get(srv.url + "/metrics", headers=auth).text
    finally:
        assert stop(srv) == 0
    series: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            series.setdefault(sample.name, set()).update(sample.labels)
    yield {"series": series, "families": {f.name for f in text_string_to_metric_families(text)}}


def _targets(dash: dict) -> list[tuple[str, str]]:
    return [(p["title"], t["expr"]) for p in dash["panels"] for t in p["targets"]]


def test_dashboard_is_importable_json() -> None:
    dash = json.loads(DASHBOARD.read_text())
    assert dash["uid"] and dash["title"] and dash["schemaVersion"] >= 30
    names = {v["name"] for v in dash["templating"]["list"]}
    assert names == {"datasource", "instance"}
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids)) == 15
    for p in dash["panels"]:
        assert p["type"] == "timeseries" and p["targets"], p["title"]
        assert p["datasource"]["uid"] == "${datasource}", p["title"]
        assert {"x", "y", "w", "h"} <= p["gridPos"].keys(), p["title"]
        assert all(t["refId"] and t["expr"] for t in p["targets"]), p["title"]


def test_every_queried_series_is_exported(exported: dict) -> None:
    series = exported["series"]
    for title, expr in _targets(json.loads(DASHBOARD.read_text())):
        queried = SERIES.findall(expr)
        assert queried, (title, expr)
        for name in queried:
            assert name in series, (title, name, sorted(series))
            for group in BY.findall(expr):
                for label in (x.strip() for x in group.split(",")):
                    # `le` is every histogram bucket's label
                    assert label in series[name], (title, name, label)


def test_every_exported_metric_has_a_panel(exported: dict) -> None:
    dash = json.loads(DASHBOARD.read_text())
    queried = {name for _, expr in _targets(dash) for name in SERIES.findall(expr)}
    ours = {f for f in exported["families"] if f.startswith("hybridllm:")}
    # a family is covered when any of its series (name, _total, _bucket, ...) is queried
    missing = {f for f in ours if not any(q == f or q.startswith(f + "_") for q in queried)}
    assert ours and not missing, missing
