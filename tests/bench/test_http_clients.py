"""The benchmark's HTTP clients against a real `serve --rust-frontend --mock-engine`: the
native (Rust) client and the Python raw client must report the same requests the same way."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from hybridllm.bench.client import build_payload
from hybridllm.bench.serve import run_level
from tests.e2e.conftest import API_KEY
from tests.launch import Server, start, stop

MODEL = "SmolLM2-135M-Instruct"
OUT_LEN = 6


@pytest.fixture(scope="module")
def mock_server(model_path: Path, tmp_path_factory) -> Iterator[Server]:
    srv = start("rust", tmp_path_factory.mktemp("clients"), "--max-model-len", "512",
                "--mock-engine", "--mock-step-ms", "1", "--api-key", API_KEY)
    yield srv
    assert stop(srv) == 0


def _payloads(n: int, **extra) -> list[bytes]:
    # Prompts of different lengths, so a mixed-up record would show in the token counts.
    return [build_payload("/v1/completions", MODEL, " ".join(["word"] * (3 + i)), OUT_LEN,
                          True, extra)
            for i in range(n)]


@pytest.mark.parametrize("client", ["native", "raw"])
@pytest.mark.parametrize("concurrency", [1, 4])
def test_client_reports_every_request_exactly(mock_server: Server, client: str,
                                              concurrency: int) -> None:
    n = 12
    s = run_level(mock_server.url + "/v1/completions", _payloads(n), float("inf"), concurrency,
                  0, API_KEY, False, None, client)
    assert (s["completed"], s["failed"]) == (n, 0), s["errors"]
    assert s["total_output_tokens"] == n * OUT_LEN
    # k words are k tokens (no special tokens on a completions prompt): 3..14 of them.
    assert s["total_input_tokens"] == sum(3 + i for i in range(n))
    assert 1.0 <= s["ttft_ms"]["p50"] <= s["e2el_ms"]["p50"]  # a 1 ms step at least
    assert s["itl_ms"]["p50"] >= 1.0 - 0.05  # one token per 1 ms step (timer slack)
    assert s["cpu"]["client_cpu_s"] > 0


@pytest.mark.parametrize("client", ["native", "raw"])
def test_client_counts_rejected_requests_as_failed(mock_server: Server, client: str) -> None:
    # The first payload (the warm-up) is good; the rest ask for a negative max_tokens.
    payloads = _payloads(1) + _payloads(3, max_tokens=-1)
    s = run_level(mock_server.url + "/v1/completions", payloads, float("inf"), 2, 0, API_KEY,
                  False, None, client)
    assert (s["completed"], s["failed"]) == (1, 3)
    [(error, count)] = s["errors"].items()
    assert count == 3 and error.startswith("HTTP 400: ") and "max_tokens" in error


def test_native_client_refuses_to_start_on_a_failing_warm_up(mock_server: Server) -> None:
    with pytest.raises(SystemExit, match="test request failed: HTTP 401"):
        run_level(mock_server.url + "/v1/completions", _payloads(2), float("inf"), 1, 0,
                  "wrong-key", False, None, "native")


@pytest.mark.parametrize("client", ["native", "raw"])
def test_clients_read_the_responses_api(mock_server: Server, client: str) -> None:
    """The Responses API's named events: text deltas timed, usage from the last event; the
    same prompts count the same input tokens as through chat completions."""
    n = 6
    prompts = [" ".join(["word"] * (3 + i)) for i in range(n)]
    stats = {}
    for endpoint in ("/v1/responses", "/v1/chat/completions"):
        payloads = [build_payload(endpoint, MODEL, p, OUT_LEN, True) for p in prompts]
        stats[endpoint] = run_level(mock_server.url + endpoint, payloads, float("inf"), 2, 0,
                                    API_KEY, False, None, client)
    s, chat = stats["/v1/responses"], stats["/v1/chat/completions"]
    assert (s["completed"], s["failed"]) == (n, 0), s["errors"]
    assert s["total_output_tokens"] == n * OUT_LEN
    assert s["total_input_tokens"] == chat["total_input_tokens"] > 0
    assert 1.0 <= s["ttft_ms"]["p50"] <= s["e2el_ms"]["p50"]
