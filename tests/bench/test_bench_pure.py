"""Pure parts of the serving benchmark: percentiles, summaries, SSE parsing, arrivals."""

from __future__ import annotations

import math
import statistics

import pytest

from hybridllm.bench.client import SSEParser, build_payload
from hybridllm.bench.metrics import RequestResult, percentile, poisson_arrivals, summarize


def test_percentile_matches_linear_interpolation() -> None:
    xs = [5.0, 1.0, 4.0, 2.0, 3.0]
    assert percentile(xs, 50) == 3.0
    assert percentile(xs, 0) == 1.0 and percentile(xs, 100) == 5.0
    assert percentile(xs, 90) == pytest.approx(4.6)  # numpy.percentile(xs, 90)
    assert percentile([7.0], 99) == 7.0
    assert percentile([], 50) == 0.0


def test_summarize_throughput_and_latencies() -> None:
    ok = [RequestResult(True, "", 10, 5, ttft=0.1, latency=0.5, itl=[0.1] * 4)
          for _ in range(3)]
    bad = RequestResult(False, "HTTP 500: boom")
    s = summarize([*ok, bad], duration=2.0)
    assert s["completed"] == 3 and s["failed"] == 1 and s["errors"] == {"HTTP 500: boom": 1}
    assert s["request_throughput"] == 1.5
    assert s["output_throughput"] == 7.5 and s["total_token_throughput"] == 22.5
    assert s["ttft_ms"]["p50"] == pytest.approx(100.0)
    assert s["tpot_ms"]["mean"] == pytest.approx(100.0)  # (0.5 - 0.1) / (5 - 1)
    assert s["itl_ms"]["p99"] == pytest.approx(100.0)
    assert s["e2el_ms"]["p90"] == pytest.approx(500.0)


def test_one_token_output_has_no_tpot() -> None:
    assert RequestResult(True, output_tokens=1, ttft=0.1, latency=0.1).tpot is None


def test_sse_parser_incremental_across_splits() -> None:
    stream = (b'data: {"a": 1}\n\n: comment\n\ndata: {"b":\n'
              b'data: 2}\r\n\r\nevent: x\ndata:[DONE]\n\n')
    want = [b'{"a": 1}', b'{"b":\n2}', b"[DONE]"]
    for size in (1, 2, 3, 7, len(stream)):  # every way of cutting the bytes
        p = SSEParser()
        got = []
        for i in range(0, len(stream), size):
            got += p.feed(stream[i : i + size])
        assert got == want, size


def test_sse_parser_waits_for_blank_line() -> None:
    p = SSEParser()
    assert p.feed(b"data: x\n") == []
    assert p.feed(b"\n") == [b"x"]


def test_poisson_arrivals_seeded_and_rate() -> None:
    a = poisson_arrivals(2000, 50.0, seed=1)
    assert a == poisson_arrivals(2000, 50.0, seed=1)
    assert a != poisson_arrivals(2000, 50.0, seed=2)
    assert a[0] == 0.0 and all(x <= y for x, y in zip(a, a[1:]))
    gaps = [y - x for x, y in zip(a, a[1:])]
    assert statistics.mean(gaps) == pytest.approx(1 / 50.0, rel=0.1)
    assert statistics.stdev(gaps) == pytest.approx(1 / 50.0, rel=0.15)  # exponential
    assert poisson_arrivals(3, math.inf, seed=0) == [0.0, 0.0, 0.0]


def test_payload_shapes() -> None:
    import json

    chat = json.loads(build_payload("/v1/chat/completions", "m", "hi", 16, True))
    assert chat["messages"] == [{"role": "user", "content": "hi"}] and chat["ignore_eos"]
    assert chat["stream"] and chat["stream_options"] == {"include_usage": True}
    comp = json.loads(build_payload("/v1/completions", "m", "hi", 16, False))
    assert comp["prompt"] == "hi" and "ignore_eos" not in comp and comp["max_tokens"] == 16
    resp = json.loads(build_payload("/v1/responses", "m", "hi", 16, True))
    assert resp == {"model": "m", "input": "hi", "max_output_tokens": 16, "stream": True,
                    "temperature": 0.0, "ignore_eos": True}


def test_random_prompts_have_the_asked_length(model_path) -> None:
    from hybridllm.bench.datasets import load_tokenizer, random_prompts

    tok = load_tokenizer(str(model_path))
    prompts = random_prompts(tok, 8, 64, seed=3)
    assert prompts == random_prompts(tok, 8, 64, seed=3) and len(set(prompts)) == 8
    lens = [len(tok.encode(p, add_special_tokens=False).ids) for p in prompts]
    assert all(abs(n - 64) <= 4 for n in lens), lens


def test_chunked_decoder_any_split() -> None:
    from hybridllm.bench.rawhttp import ChunkedDecoder

    body = [b"data: a\n\n", b"x" * 300, b"data: [DONE]\n\n"]
    wire = b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in body) + b"0\r\n\r\n"
    for size in (1, 2, 5, 64, len(wire)):
        dec = ChunkedDecoder()
        got = b""
        for i in range(0, len(wire), size):
            assert not dec.done
            got += dec.feed(wire[i : i + size])
        assert dec.done and got == b"".join(body), size


def test_engine_alone_closed_loop_respects_the_mock_step(model_path) -> None:
    from hybridllm.bench.engine_alone import measure

    step_ms, out_len = 2.0, 4
    got = measure(step_ms, ["--model", str(model_path)], {1: 3, 4: 8}, 12, out_len)
    assert sorted(got) == [1, 4]
    for conc, r in got.items():
        assert r["ttft_p50_ms"] >= step_ms  # the first token takes a whole step
        assert r["ttft_p99_ms"] >= r["ttft_p50_ms"]
        # A closed loop of conc streams of out_len tokens cannot beat one step per token.
        assert 0 < r["req_s"] <= conc / (out_len * step_ms / 1000.0)
