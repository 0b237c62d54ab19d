"""lm-eval-harness, unmodified, against `hybridllm serve --rust-frontend`.

lm-eval's `local-completions` model finds the server's tokenizer through /tokenizer_info,
/tokenize and /detokenize (no hub), scores every answer choice with `echo` + `logprobs` +
`max_tokens: 1` on token-id prompts, and generates with `stop`. Its per-choice loglikelihoods
must equal those of lm-eval's own `hf` backend on the same converted model, and so must the
accuracy and the greedy generations. Both run the repo's tasks in `lm_eval_tasks/` (local
JSONL files: no dataset download).
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import API_KEY, start_serve, stop_serve

TASKS_DIR = Path(__file__).parent / "lm_eval_tasks"
TASKS = ["hybridllm_mc", "hybridllm_gen"]
NUM_MC, NUM_CHOICES, NUM_GEN = 24, 4, 6
LOGLIK_TOL = 1e-3


def _lm_eval(out: Path, model: str, model_args: str, *extra: str) -> str:
    """Runs the lm_eval CLI (offline) on the repo's tasks; returns its log."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "OPENAI_API_KEY": API_KEY, "TOKENIZERS_PARALLELISM": "false"}
    cmd = [sys.executable, "-m", "lm_eval", "--model", model, "--model_args", model_args,
           "--tasks", ",".join(TASKS), "--include_path", str(TASKS_DIR), "--log_samples",
           "--output_path", str(out), *extra]
    # The task files name their data relative to the task folder.
    r = subprocess.run(cmd, cwd=TASKS_DIR, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-5000:]
    return r.stdout + r.stderr


def _samples(out: Path, task: str) -> dict[int, Any]:
    (path,) = glob.glob(str(out / "*" / f"samples_{task}_*.jsonl"))
    rows = [json.loads(line) for line in Path(path).read_text().splitlines()]
    return {r["doc_id"]: r for r in rows}


@pytest.fixture(scope="module")
def runs(model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("lm_eval")
    server = start_serve(model_path, tmp, "--api-key", API_KEY)  # --max-model-len 512
    try:
        name = httpx.get(server.url + "/v1/models",
                         headers={"Authorization": f"Bearer {API_KEY}"}).json()["data"][0]["id"]
        log = _lm_eval(tmp / "server", "local-completions",
                       f"base_url={server.url}/v1/completions,model={name},"
                       f"auth_token={API_KEY},max_length=512", "--batch_size", "4")
    finally:
        assert stop_serve(server) == 0
    # auto-detected through /tokenizer_info and /tokenize: no hub tokenizer
    assert "Using remote tokenizer" in log, log[-3000:]
    _lm_eval(tmp / "hf", "hf", f"pretrained={model_path},dtype=float32", "--device", "cpu",
             "--batch_size", "8")
    return {"server": tmp / "server", "hf": tmp / "hf"}


def test_loglikelihoods_match_hf_backend(runs: dict[str, Path]) -> None:
    server, hf = _samples(runs["server"], TASKS[0]), _samples(runs["hf"], TASKS[0])
    assert sorted(server) == sorted(hf) == list(range(NUM_MC))
    for doc_id, row in server.items():
        ours = [(float(ll), greedy) for ll, greedy in row["filtered_resps"]]
        ref = [(float(ll), greedy) for ll, greedy in hf[doc_id]["filtered_resps"]]
        assert len(ours) == len(ref) == NUM_CHOICES
        for (ll, greedy), (ref_ll, ref_greedy) in zip(ours, ref):
            assert abs(ll - ref_ll) <= LOGLIK_TOL, (doc_id, ours, ref)
            assert ll < 0
            assert greedy == ref_greedy, (doc_id, ours, ref)
        assert row["acc"] == hf[doc_id]["acc"], doc_id


def test_accuracy_identical(runs: dict[str, Path]) -> None:
    accs = {}
    for backend, out in runs.items():
        (path,) = glob.glob(str(out / "*" / "results_*.json"))
        accs[backend] = json.loads(Path(path).read_text())["results"][TASKS[0]]["acc,none"]
    assert accs["server"] == accs["hf"], accs


def test_generate_until_matches_hf_backend(runs: dict[str, Path]) -> None:
    server, hf = _samples(runs["server"], TASKS[1]), _samples(runs["hf"], TASKS[1])
    assert sorted(server) == sorted(hf) == list(range(NUM_GEN))
    for doc_id, row in server.items():
        (text,) = row["filtered_resps"]
        assert text and "\n" not in text, (doc_id, text)  # stopped at the `until` string
        assert text == hf[doc_id]["filtered_resps"][0], doc_id
