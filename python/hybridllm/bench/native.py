"""`--http-client native`: one load level sent by `hybridllm-loadgen`, the package's Rust
HTTP client. Python still builds the requests and computes every figure; the binary only
sends them and times the chunks (same rules as client.py), for about half the CPU of the
Python raw client, so on a small machine it takes less from the server it measures."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import urllib.parse

from hybridllm.bench.metrics import CpuMeter, RequestResult


def loadgen_binary() -> str:
    from hybridllm.entrypoints.rust_frontend import find_packaged_binary

    return str(find_packaged_binary("hybridllm-loadgen", "HYBRIDLLM_LOADGEN_PATH"))


def _expect(proc: subprocess.Popen, word: str) -> None:
    assert proc.stderr is not None
    line = proc.stderr.readline().strip()
    if line != word:
        rest = proc.stderr.read()
        proc.wait()
        raise SystemExit(f"bench: native client: {(line + ' ' + rest).strip()}")


def run_native(url: str, payloads: list[bytes], arrivals: list[float],
               concurrency: int | None, api_key: str | None,
               meter: CpuMeter) -> tuple[list[RequestResult], float, dict]:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme != "http":
        raise SystemExit(f"bench: the native client speaks plain http, not {parts.scheme}")
    job = {"authority": parts.netloc, "path": parts.path or "/", "api_key": api_key,
           "concurrency": concurrency, "arrivals": arrivals,
           "payloads": [p.decode() for p in payloads]}
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(job, f)
    try:
        proc = subprocess.Popen([loadgen_binary(), f.name], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        _expect(proc, "start")
        meter.start()
        _expect(proc, "done")
        out, err = proc.communicate()
    finally:
        os.unlink(f.name)
    if proc.returncode != 0:
        raise SystemExit(f"bench: native client exited {proc.returncode}: {err.strip()}")
    report = json.loads(out)
    cpu = meter.stop(client_cpu_s=report["cpu_s"])
    return [RequestResult(**r) for r in report["results"]], report["duration_s"], cpu
