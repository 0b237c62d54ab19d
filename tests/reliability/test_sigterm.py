"""SIGTERM under load (`serve --rust-frontend`, mock engine so that the timings are exact: 20 ms
a step). New connections are refused or answered 503; requests that can finish within
--shutdown-timeout do, whole; streams still running at the timeout end with an error event
(chat/completions and /v1/responses alike; their engine requests aborted), not a silent cut,
and a non-streamed request still running then is answered 503; then `serve` exits 0."""

from __future__ import annotations

import json
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from tests.launch import metric, process_tree, running, start
from tests.reliability.conftest import API_KEY

AUTH = {"Authorization": f"Bearer {API_KEY}"}
TIMEOUT_S = 3.0
SHORT, LONG = 40, 2000  # tokens: 0.8 s and 40 s of 20 ms steps


def _data_lines(url: str, body: dict, started: threading.Event) -> tuple[list[str], float]:
    """The data lines of one stream, and when (monotonic) its connection ended."""
    lines = []
    with httpx.stream("POST", url, headers=AUTH, timeout=60, json=body) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith("data: "):
                lines.append(line[6:])
                started.set()
    return lines, time.monotonic()


def _stream(url: str, max_tokens: int, started: threading.Event) -> tuple[list[str], float]:
    return _data_lines(url + "/v1/completions", {
        "prompt": "Hello", "max_tokens": max_tokens, "ignore_eos": True, "stream": True},
        started)


def _responses_stream(url: str, max_tokens: int, started: threading.Event
                      ) -> tuple[list[dict], float]:
    """The events of one /v1/responses stream, and when its connection ended."""
    lines, ended = _data_lines(url + "/v1/responses", {
        "input": "Hello", "max_output_tokens": max_tokens, "ignore_eos": True,
        "stream": True}, started)
    return [json.loads(x) for x in lines], ended


def _new_request_refused(url: str) -> str:
    try:
        r = httpx.get(url + "/health", timeout=2)
    except httpx.ConnectError:
        return "refused"
    assert r.status_code == 503, f"a new request was answered {r.status_code} while draining"
    return "503"


def test_sigterm_drains_then_cuts_with_an_error_event(model_path: Path, tmp_path: Path) -> None:
    srv = start("rust", tmp_path, "--mock-engine", "--mock-step-ms", "20",
                "--max-model-len", "4096", "--shutdown-timeout", str(TIMEOUT_S),
                "--api-key", API_KEY)
    tree = process_tree(srv.proc.pid)[1:]
    try:
        with ThreadPoolExecutor(7) as pool:
            events = [threading.Event() for _ in range(5)]
            shorts = [pool.submit(_stream, srv.url, SHORT, e) for e in events[:2]]
            longs = [pool.submit(_stream, srv.url, LONG, e) for e in events[2:4]]
            long_responses = pool.submit(_responses_stream, srv.url, LONG, events[4])
            plain, plain_long = (
                pool.submit(httpx.post, srv.url + "/v1/completions", headers=AUTH, timeout=60,
                            json={"prompt": "Hello", "max_tokens": n, "ignore_eos": True})
                for n in (SHORT, LONG))
            for e in events:
                assert e.wait(30), "a stream never started"
            deadline = time.monotonic() + 30
            while metric(srv, "hybridllm:num_requests_running") < 7:  # the plain ones too
                assert time.monotonic() < deadline
                time.sleep(0.02)
            t0 = time.monotonic()
            srv.proc.send_signal(signal.SIGTERM)
            time.sleep(0.3)
            new = _new_request_refused(srv.url)
            for f in shorts:  # finished whole, well within the timeout
                lines, _ = f.result(timeout=30)
                assert lines[-1] == "[DONE]"
                text = "".join(json.loads(x)["choices"][0]["text"] for x in lines[:-1])
                assert len(lines) - 1 == SHORT and text, lines[-3:]
            r = plain.result(timeout=30)
            assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == SHORT
            for f in longs:  # cut at the timeout, with an error event first
                lines, ended = f.result(timeout=30)
                assert lines[-1] == "[DONE]"
                error = json.loads(lines[-2])["error"]
                assert error["code"] == 503 and "--shutdown-timeout" in error["message"]
                assert len(lines) - 2 < LONG
                cut = ended - t0
                assert TIMEOUT_S - 0.1 < cut < TIMEOUT_S + 1.5, cut
            events_r, ended = long_responses.result(timeout=30)
            assert events_r[-1]["type"] == "error", events_r[-2:]
            assert events_r[-1]["code"] == "ServiceUnavailableError"
            assert "--shutdown-timeout" in events_r[-1]["message"]
            assert [e["sequence_number"] for e in events_r] == list(range(len(events_r)))
            assert TIMEOUT_S - 0.1 < ended - t0 < TIMEOUT_S + 1.5, ended - t0
            r = plain_long.result(timeout=30)
            assert r.status_code == 503, r.text
            error = r.json()["error"]
            assert error["code"] == 503 and "--shutdown-timeout" in error["message"]
        code = srv.proc.wait(timeout=TIMEOUT_S + 10)
        exited = time.monotonic() - t0
        print(f"\nSIGTERM under load (Rust frontend, --shutdown-timeout {TIMEOUT_S}): new "
              f"request {new}, long streams cut with an error event after {cut:.2f} s, serve "
              f"exited {code} after {exited:.2f} s")
        assert code == 0
        assert not [p for p in tree if running(p)]
    finally:
        srv.proc.kill()
