"""docs/api_fields.md stays consistent and true: each request class's counts are its table's
rows, every row has exactly one verdict; the tables are walked against the servers (every
"refused" field gets a 400 naming it in every frontend; embeddings' in test_embeddings.py),
and every "honoured" field is sent by at least one test of the served API (whose assertions
are that field's check)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

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


# A value asking for something, per refused field (a new refused row needs one here).
VLLM_REFUSED: dict[str, Any] = {
    "kv_transfer_params": {"a": 1}, "vllm_xargs": {"a": 1},
    "thinking_token_budget": 64, "watermarking": True, "truncation_side": "right",
    "logprob_token_ids": [5],
    "repetition_detection": {"max_pattern_size": 4}, "stream_interval": 4,
    "ec_transfer_params": {"a": 1}, "routed_experts_prompt_start": 1,
    "return_token_offsets": True, "return_mm_kwargs": False,
}
MULTIMODAL = {"media_io_kwargs": {"image": {"a": 1}}, "mm_processor_kwargs": {"a": 1}}
REFUSED_SAMPLES: dict[str, dict[str, Any]] = {
    "ChatCompletionRequest": {
        "reasoning_effort": "low", "return_prompt_text": True, **MULTIMODAL, **VLLM_REFUSED,
    },
    "CompletionRequest": {"suffix": "x", "prompt_embeds": "AAAA", **VLLM_REFUSED},
    "ResponsesRequest": {
        "prompt": {"id": "p"}, "reasoning": {"effort": "low"},
        "structured_outputs": {"regex": "a"}, "vllm_xargs": {"a": 1},
        "enable_response_messages": True, "previous_response": {"id": "resp_1"},
        "kv_transfer_params": {"a": 1}, "chat_template_kwargs": {"enable_thinking": True},
        "previous_input_messages": [{"role": "user", "content": "x"}], **MULTIMODAL,
    },
    "EmbeddingCompletionRequest": {
        "truncation_side": "left", "priority": 2, "padding": "max_length", **MULTIMODAL,
    },
}
BASES = {
    "ChatCompletionRequest": ("/v1/chat/completions",
                              {"messages": [{"role": "user", "content": "Hi"}]}),
    "CompletionRequest": ("/v1/completions", {"prompt": "Hi"}),
    "ResponsesRequest": ("/v1/responses", {"input": "Hi"}),
    "EmbeddingCompletionRequest": ("/v1/embeddings", {"input": "Hi"}),  # test_embeddings.py
}
SERVED_TESTS = ("conformance", "reliability", "structured", "e2e", "rust_frontend",
                "python_frontend", "scaleout", "tools")


def _rows(cls: str, verdict: str) -> list[str]:
    (title,) = [t for t in _sections() if t.startswith(f"`{cls}`")]
    return [r.split("|")[1].strip().strip("`") for r in _sections()[title].splitlines()
            if r.startswith("| `") and f"**{verdict}**" in r]


def walk_refused(servers: dict, cls: str) -> None:
    """Each refused row of `cls`, sent with its sample value: a 400 naming it, everywhere."""
    refused = _rows(cls, "refused")
    assert sorted(refused) == sorted(REFUSED_SAMPLES[cls]), "a refused row without a sample"
    path, base = BASES[cls]
    for field in refused:
        for mode, s in servers.items():
            r = s.http.post(path, json={**base, field: REFUSED_SAMPLES[cls][field]})
            assert r.status_code == 400, (cls, field, mode, r.text)
            assert r.json()["error"]["param"] == field, (cls, field, mode, r.json())


@pytest.mark.parametrize("cls", [c for c in BASES if not c.startswith("Embedding")])
def test_every_refused_field_is_a_400_naming_it(servers: dict, cls: str) -> None:
    walk_refused(servers, cls)


def test_every_honoured_field_is_sent_by_a_test() -> None:
    tests = Path(__file__).parents[1]
    text = "".join(p.read_text() for d in SERVED_TESTS for p in (tests / d).rglob("*.py"))
    for cls in ("ChatCompletionRequest", "CompletionRequest", "ResponsesRequest",
                "EmbeddingCompletionRequest"):
        unsent = [f for f in _rows(cls, "honoured")
                  if f'"{f.split(".")[-1]}"' not in text and f"{f.split('.')[-1]}=" not in text]
        assert unsent == [], (cls, unsent)
