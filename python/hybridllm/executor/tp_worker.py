"""Starting the tensor-parallel ranks of one node as processes, and what each one runs.

Node 0 runs rank 0 inside the engine's own process (its runner is the engine's) and starts
its other ranks here; every other node (`serve --headless`) starts all of its ranks here and
waits for them. Each rank is a spawned process (CUDA cannot be forked) that leaves when its
parent dies, and its torch thread count is its share of the node's.
"""

from __future__ import annotations

import dataclasses
import multiprocessing as mp
import os
import signal
from multiprocessing.process import BaseProcess

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


def start_ranks(config: EngineConfig, ranks: range | list[int]) -> list[BaseProcess]:
    """One process per rank, each joining the group at config.parallel's rendezvous."""
    ctx = mp.get_context("spawn")
    threads = threads_per_rank(config)
    procs = []
    for rank in ranks:
        proc = ctx.Process(target=run_rank, args=(config, rank, threads), daemon=True,
                           name=f"hybridllm-tp-rank-{rank}")
        proc.start()
        procs.append(proc)
    return procs


def run_rank(config: EngineConfig, rank: int, threads: int) -> None:
    """A rank other than 0: its shard of the model, then rank 0's steps until it stops."""
    import ctypes

    from hybridllm.executor.model_runner import ModelRunner

    try:  # leave with the parent (a daemon process is not ended when its parent is killed)
        ctypes.CDLL("libc.so.6").prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except OSError:
        pass
    torch.set_num_threads(threads)
    if config.device.type == "cuda":
        torch.cuda.set_device(rank % config.parallel.ranks_per_node)
    runner = ModelRunner(config, None, rank=rank)
    runner.follow()
    destroy_group()


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
    for proc in procs:
        proc.join()
        if proc.exitcode and not stopping:
            failed = True
            print(f"hybridllm: tensor-parallel rank {proc.name} exited with status "
                  f"{proc.exitcode}; stopping this node", flush=True)
            _terminate(procs)
    return 1 if failed else 0


def _terminate(procs: list[BaseProcess]) -> None:
    for proc in procs:
        if proc.is_alive() and proc.pid is not None:
            os.kill(proc.pid, signal.SIGTERM)
