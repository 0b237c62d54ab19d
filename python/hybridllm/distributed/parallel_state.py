"""The tensor-parallel group: which rank this process is, and the collectives the sharded
model calls. World size 1 is the plain model: every collective is then a no-op.

Ranks follow torchrun's numbering: with `nnodes` nodes of `world_size // nnodes` ranks each,
node n holds ranks n*L .. n*L+L-1, and global rank 0 (node 0) schedules.
"""

from __future__ import annotations

import ipaddress
import os
import socket
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class ParallelConfig:
    """Where this engine's tensor-parallel ranks run (flags spelled as torchrun's)."""

    tensor_parallel_size: int = 1
    nnodes: int = 1
    node_rank: int = 0
    master_addr: str = "127.0.0.1"
    master_port: int | None = None  # None: rank 0 picks a free port (one node only)

    @property
    def ranks_per_node(self) -> int:
        return self.tensor_parallel_size // self.nnodes

    def node_ranks(self) -> range:
        per = self.ranks_per_node
        return range(self.node_rank * per, (self.node_rank + 1) * per)

    def check(self) -> None:
        tp, nn = self.tensor_parallel_size, self.nnodes
        if tp < 1:
            raise ValueError(f"--tensor-parallel-size must be at least 1, got {tp}")
        if nn < 1 or tp % nn:
            raise ValueError(f"--nnodes {nn} must divide --tensor-parallel-size {tp} "
                             "(every node runs the same number of ranks)")
        if not 0 <= self.node_rank < nn:
            raise ValueError(f"--node-rank {self.node_rank} is outside 0..{nn - 1} "
                             f"(--nnodes {nn})")
        if nn > 1 and self.master_port is None:
            raise ValueError(f"--nnodes {nn} needs --master-port (every node must dial the "
                             "same rendezvous)")


@dataclass(frozen=True)
class TensorParallelGroup:
    rank: int = 0
    world_size: int = 1

    def shard(self, size: int, what: str) -> int:
        """This rank's share of `size` (heads, columns); refused when it does not divide."""
        if size % self.world_size:
            raise ValueError(f"--tensor-parallel-size {self.world_size} must divide {what} "
                             f"({size})")
        return size // self.world_size

    def all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        """Sum over ranks, in place (the row-parallel projections' partial products)."""
        if self.world_size > 1:
            dist.all_reduce(x)
        return x

    def all_gather_last(self, x: torch.Tensor) -> torch.Tensor:
        """Concatenate every rank's x along the last dimension (vocab-parallel logits)."""
        if self.world_size == 1:
            return x
        x = x.contiguous()
        parts = [torch.empty_like(x) for _ in range(self.world_size)]
        dist.all_gather(parts, x)
        return torch.cat(parts, dim=-1)

    def min_over_ranks(self, n: int) -> int:
        if self.world_size == 1:
            return n
        t = torch.tensor([n])
        dist.all_reduce(t, op=dist.ReduceOp.MIN)
        return int(t.item())

    def broadcast(self, obj: object) -> object:
        """Rank 0's obj on every rank (the step's host inputs)."""
        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]


SINGLE = TensorParallelGroup()


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _is_loopback(addr: str) -> bool:
    try:
        return ipaddress.ip_address(socket.gethostbyname(addr)).is_loopback
    except (OSError, ValueError):
        return False


def init_group(rank: int, parallel: ParallelConfig, device: torch.device,
               timeout_s: float = 600.0) -> TensorParallelGroup:
    """Join the group (blocks until every rank has joined). On a loopback rendezvous gloo is
    kept on the loopback interface: by default it would use the host name's address."""
    if _is_loopback(parallel.master_addr):
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(
        backend,
        init_method=f"tcp://{parallel.master_addr}:{parallel.master_port}",
        rank=rank,
        world_size=parallel.tensor_parallel_size,
        timeout=timedelta(seconds=timeout_s),
    )
    return TensorParallelGroup(rank, parallel.tensor_parallel_size)


def destroy_group() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()
