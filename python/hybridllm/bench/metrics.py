"""Pure parts of the serving benchmark: per-request results, percentiles, summaries, Poisson
arrivals, and CPU accounting (this process, the machine, and optionally server processes)."""

from __future__ import annotations

import math
import os
import random
import time
from dataclasses import dataclass, field

PERCENTILES = (50, 90, 99)


@dataclass
class RequestResult:
    success: bool = False
    error: str = ""
    prompt_tokens: int = 0
    output_tokens: int = 0
    ttft: float = 0.0  # seconds from send to the first chunk with generated text
    latency: float = 0.0  # seconds from send to the end of the stream
    itl: list[float] = field(default_factory=list)  # gaps between text-bearing chunks

    @property
    def tpot(self) -> float | None:
        """Mean time per output token after the first; None for one-token outputs."""
        if self.output_tokens <= 1:
            return None
        return (self.latency - self.ttft) / (self.output_tokens - 1)


def percentile(values: list[float], p: float) -> float:
    """Linear-interpolated percentile (numpy's default), 0.0 for no values."""
    if not values:
        return 0.0
    xs = sorted(values)
    k = (len(xs) - 1) * p / 100.0
    lo, hi = math.floor(k), math.ceil(k)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def stats_ms(values: list[float]) -> dict[str, float]:
    """mean and percentiles of seconds, in milliseconds."""
    out = {"mean": 1000.0 * sum(values) / len(values) if values else 0.0}
    for p in PERCENTILES:
        out[f"p{p}"] = 1000.0 * percentile(values, p)
    return out


def summarize(results: list[RequestResult], duration: float) -> dict:
    ok = [r for r in results if r.success]
    prompt = sum(r.prompt_tokens for r in ok)
    output = sum(r.output_tokens for r in ok)
    tpots = [t for r in ok if (t := r.tpot) is not None]
    errors: dict[str, int] = {}
    for r in results:
        if not r.success:
            errors[r.error[:120]] = errors.get(r.error[:120], 0) + 1
    return {
        "completed": len(ok),
        "failed": len(results) - len(ok),
        "errors": errors,
        "duration_s": duration,
        "total_input_tokens": prompt,
        "total_output_tokens": output,
        "request_throughput": len(ok) / duration if duration > 0 else 0.0,
        "output_throughput": output / duration if duration > 0 else 0.0,
        "total_token_throughput": (prompt + output) / duration if duration > 0 else 0.0,
        "ttft_ms": stats_ms([r.ttft for r in ok]),
        "tpot_ms": stats_ms(tpots),
        "itl_ms": stats_ms([x for r in ok for x in r.itl]),
        "e2el_ms": stats_ms([r.latency for r in ok]),
    }


def poisson_arrivals(n: int, rate: float, seed: int) -> list[float]:
    """Send offsets in seconds for n requests at `rate` requests/s (exponential gaps, the
    first at 0); all zeros for an infinite rate."""
    if math.isinf(rate) or n == 0:
        return [0.0] * n
    if rate <= 0:
        raise ValueError("request rate must be > 0")
    rng = random.Random(seed)
    t, out = 0.0, [0.0]
    for _ in range(n - 1):
        t += rng.expovariate(rate)
        out.append(t)
    return out


_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def proc_cpu_seconds(pid: int) -> float:
    """utime + stime of a live process from /proc, 0.0 when it is gone or unreadable."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _TICK
    except (OSError, IndexError, ValueError):
        return 0.0


def machine_busy_seconds() -> tuple[float, float]:
    """(busy, total) CPU seconds summed over all cores since boot, from /proc/stat."""
    try:
        with open("/proc/stat") as f:
            parts = [int(x) for x in f.readline().split()[1:]]
    except OSError:
        return 0.0, 0.0
    idle = parts[3] + (parts[4] if len(parts) > 4 else 0)
    total = sum(parts[:8])
    return (total - idle) / _TICK, total / _TICK


class CpuMeter:
    """CPU used between start() and stop(): this process, the whole machine, and named pids."""

    def __init__(self, pids: dict[str, list[int]] | None = None) -> None:
        self.pids = pids or {}

    def start(self) -> None:
        self.wall0 = time.perf_counter()
        self.cpu0 = time.process_time()
        self.machine0 = machine_busy_seconds()
        self.procs0 = {k: sum(map(proc_cpu_seconds, v)) for k, v in self.pids.items()}

    def stop(self, client_cpu_s: float | None = None) -> dict:
        """client_cpu_s: the client's CPU when it is another process (the native client)."""
        wall = time.perf_counter() - self.wall0
        cores = os.cpu_count() or 1
        client = time.process_time() - self.cpu0 if client_cpu_s is None else client_cpu_s
        busy1, total1 = machine_busy_seconds()
        busy = busy1 - self.machine0[0]
        total = total1 - self.machine0[1]
        out = {
            "wall_s": wall,
            "cores": cores,
            "client_cpu_s": client,
            "client_cpu_share": client / wall if wall else 0.0,  # 1.0 = one core busy
            "client_machine_fraction": client / wall / cores if wall else 0.0,
            "machine_busy_fraction": busy / total if total else 0.0,
        }
        for name, pids in self.pids.items():
            used = sum(map(proc_cpu_seconds, pids)) - self.procs0[name]
            out[f"{name}_cpu_s"] = used
            out[f"{name}_cpu_share"] = used / wall if wall else 0.0
        return out
