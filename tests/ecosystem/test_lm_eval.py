"""lm-eval-harness, unmodified, against `hybridllm serve --rust-frontend`.

lm-eval's `local-completions` model finds the server's tokenizer through /tokenizer_info,
/tokenize and /detokenize (no hub), scores every answer choice with `echo` + `logprobs` +
`max_tokens: 1` on token-id prompts, and generates with `stop`. Its per-choice loglikelihoods
must equal those of lm-eval's own `hf` backend on the same converted model, and so must the
accuracy and the greedy generations. Both run the repo's tasks in `lm_eval_tasks/` (local
JSONL files: no dataset download). The hf backend's answers are the `lm_eval_hf` golden
reference (tests/golden; test_live.py reruns the backend on one document of each task).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from tests import golden
from tests.e2e.conftest import API_KEY
from tests.golden.kinds import lm_eval_summary, run_lm_eval
from tests.launch import start, stop

NUM_MC, NUM_CHOICES, NUM_GEN = 24, 4, 6
LOGLIK_TOL = 1e-3


@pytest.fixture(scope="module")
def runs(model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("lm_eval")
    server = start("rust", tmp, "--max-model-len", "512", "--api-key", API_KEY)
    try:
        name = httpx.get(server.url + "/v1/models",
                         headers={"Authorization": f"Bearer {API_KEY}"}).json()["data"][0]["id"]
        log = run_lm_eval(tmp / "server", "local-completions",
                          f"base_url={server.url}/v1/completions,model={name},"
                          f"auth_token={API_KEY},max_length=512", "--batch_size", "4",
                          env={"OPENAI_API_KEY": API_KEY})
    finally:
        assert stop(server) == 0
    # auto-detected through /tokenizer_info and /tokenize: no hub tokenizer
    assert "Using remote tokenizer" in log, log[-3000:]
    return {"server": lm_eval_summary(tmp / "server"), "hf": golden.load("lm_eval_hf")}


def test_loglikelihoods_match_hf_backend(runs: dict[str, Any]) -> None:
    server, hf = runs["server"]["mc"], runs["hf"]["mc"]
    assert len(server) == len(hf) == NUM_MC
    for doc_id, (row, ref_row) in enumerate(zip(server, hf)):
        ours, ref = row["resps"], ref_row["resps"]
        assert len(ours) == len(ref) == NUM_CHOICES
        for (ll, greedy), (ref_ll, ref_greedy) in zip(ours, ref):
            assert abs(ll - ref_ll) <= LOGLIK_TOL, (doc_id, ours, ref)
            assert ll < 0
            assert greedy == ref_greedy, (doc_id, ours, ref)
        assert row["acc"] == ref_row["acc"], doc_id


def test_accuracy_identical(runs: dict[str, Any]) -> None:
    assert runs["server"]["acc"] == runs["hf"]["acc"], (runs["server"]["acc"], runs["hf"]["acc"])


def test_generate_until_matches_hf_backend(runs: dict[str, Any]) -> None:
    server, hf = runs["server"]["gen"], runs["hf"]["gen"]
    assert len(server) == len(hf) == NUM_GEN
    for doc_id, (text, ref) in enumerate(zip(server, hf)):
        assert text and "\n" not in text, (doc_id, text)  # stopped at the `until` string
        assert text == ref, doc_id
