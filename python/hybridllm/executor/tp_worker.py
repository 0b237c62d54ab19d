"""Starting the tensor-parallel ranks of one node as processes, and what each one runs.

Node 0 runs rank 0 inside the engine's own process (its runner is the engine's) and starts
its other ranks here; every other node (`serve --headless`) starts all of its ranks here and
waits for them. Each rank is a fresh interpreter running `rank_main()` (the engine config
pickled on its stdin): CUDA cannot be forked, and multiprocessing's spawn
would re-run the user's main script (an offline script without a `__main__` guard). A rank
leaves when its parent dies, and its torch thread count is its share of the node's.
"""

from __future__ import annotations

import dataclasses
import pickle
import signal
import subprocess
import sys

import torch

from hybridllm.config import EngineConfig
from hybridllm.distributed.parallel_state import destroy_group, free_port

_PR_SET_PDEATHSIG = 1


def with_rendezvous(config: EngineConfig) -> EngineConfig:
    """Node 0 of a one-node group picks the rendezvous port when none was given."""
    parallel = config.parallel
    if parallel.tensor_parallel_size == 1 or parallel.master_port is not None:
        return config
    port = free_port(parallel.master_addr)
    return dataclasses.replace(config, parallel=dataclasses.replace(parallel, master_port=port))


def threads_per_rank(config: EngineConfig) -> int:
    return max(1, torch.get_num_threads() // config.parallel.ranks_per_node)


_RANK_MAIN = "from hybridllm.executor.tp_worker import rank_main; rank_main()"


def start_ranks(config: EngineConfig, ranks: range | list[int]) -> list[subprocess.Popen]:
    """One process per rank, each joining the group at config.parallel's rendezvous."""
    payload = pickle.dumps(config)
    threads = threads_per_rank(config)
    procs = []
    for rank in ranks:
        proc = subprocess.Popen(
            [sys.executable, "-c", _RANK_MAIN, str(rank), str(threads)],
            stdin=subprocess.PIPE,
        )
        assert proc.stdin is not None
        proc.stdin.write(payload)
        proc.stdin.close()
        procs.append(proc)
    return procs


def run_rank(config: EngineConfig, rank: int, threads: int) -> int:
    """A rank other than 0: its shard of the model, then rank 0's steps until it stops (0),
    or until rank 0 is gone (1)."""
    import ctypes

    from hybridllm.executor.model_runner import ModelRunner

    try:  # leave with the parent
        ctypes.CDLL("libc.so.6").prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except OSError:
        pass
    torch.set_num_threads(threads)
    if config.device.type == "cuda":
        torch.cuda.set_device(rank % config.parallel.ranks_per_node)
    runner = ModelRunner(config, None, rank=rank)
    try:
        runner.follow()
    except RuntimeError as e:  # gloo / NCCL: a peer's connection closed
        print(f"hybridllm: tensor-parallel rank {rank}: the group broke ({e}); leaving",
              file=sys.stderr, flush=True)
        return 1
    destroy_group()
    return 0


def run_headless(config: EngineConfig) -> int:
    """A node other than 0: run this node's ranks until rank 0 stops them (0) or one of them
    fails (non-zero). SIGTERM ends them."""
    parallel = config.parallel
    if parallel.node_rank == 0:
        raise ValueError("--headless runs the ranks of a node other than 0 (--node-rank >= 1); "
                         "node 0 serves the API")
    procs = start_ranks(config, parallel.node_ranks())
    print(f"hybridllm: headless node {parallel.node_rank} of {parallel.nnodes}: tensor-parallel "
          f"ranks {list(parallel.node_ranks())}, rank 0 at "
          f"{parallel.master_addr}:{parallel.master_port}", flush=True)
    stopping = []

    def stop(*_: object) -> None:
        stopping.append(True)
        _terminate(procs)

    signal.signal(signal.SIGTERM, stop)
    failed = False
    for rank, proc in zip(parallel.node_ranks(), procs):
        code = proc.wait()
        if code and not stopping:
            failed = True
            print(f"hybridllm: tensor-parallel rank {rank} exited with status {code}; "
                  "stopping this node", flush=True)
            _terminate(procs)
    return 1 if failed else 0


def _terminate(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)


def rank_main() -> None:
    """A rank's process: `python -c _RANK_MAIN RANK THREADS`, its config on stdin."""
    sys.exit(run_rank(pickle.load(sys.stdin.buffer), int(sys.argv[1]), int(sys.argv[2])))
