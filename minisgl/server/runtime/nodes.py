"""Multi-node serving: which tensor-parallel ranks this node runs, and where the ranks meet.

The ranks are split evenly and in order: with --tp 8 --nnodes 2, node 0 runs ranks 0-3 and node 1
ranks 4-7, so each node's ranks share its NVLink and only the node boundary crosses the network.
Node 0 (the head) also runs everything else: API, tokenizers, detokenizer and the scheduler, which
lives on rank 0 and broadcasts what it receives to the other ranks (minisgl.scheduler.process), so the
other nodes need no ZMQ socket nor HTTP server: torch.distributed carries all they get.

One node meets locally through a file (no port to race for). Several meet at --dist-init-addr
over TCP: rank 0 hosts torch.distributed's store there, the others connect to it (gloo on the
CPU, NCCL on GPUs; the scheduler's messages always travel over a gloo group).
"""

from __future__ import annotations

from dataclasses import dataclass

from minisgl.utils.net import rendezvous_addr

from ..args import ServerArgs


@dataclass(frozen=True)
class NodePlacement:
    tp: int
    nnodes: int = 1
    node_rank: int = 0
    dist_init_addr: str | None = None

    @classmethod
    def of(cls, args: ServerArgs) -> NodePlacement:
        return cls(args.tp, args.nnodes, args.node_rank, args.dist_init_addr)

    @property
    def ranks_per_node(self) -> int:
        return self.tp // self.nnodes

    @property
    def local_ranks(self) -> range:
        """The tensor-parallel ranks whose engine processes this node starts."""
        first = self.node_rank * self.ranks_per_node
        return range(first, first + self.ranks_per_node)

    @property
    def is_head(self) -> bool:
        """Node 0: the API, tokenizers, detokenizer and scheduler run here."""
        return self.node_rank == 0

    def rendezvous(self) -> str:
        """torch.distributed's init_method for every rank of this server."""
        if self.nnodes == 1:
            return rendezvous_addr()
        return f"tcp://{self.dist_init_addr}"
