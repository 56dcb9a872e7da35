"""Addresses for the server's processes: TCP ports, ipc:// endpoints, torch.distributed rendezvous.
Standard library only: the launcher makes them before it imports torch."""

from __future__ import annotations

import os
import socket
import tempfile


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now (the OS picks it)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def rendezvous_addr() -> str:
    """A fresh file:// rendezvous for torch.distributed's ranks on this machine. A file, not a free
    TCP port: between picking a port and binding it, NCCL's own connections can take it."""
    return "file://" + os.path.join(tempfile.mkdtemp(prefix="minisgl-rdzv-"), "init")


def ipc_addresses(names: list[str]) -> dict[str, str]:
    """Fresh ipc:// endpoints, one per name, in a private temp directory."""
    root = tempfile.mkdtemp(prefix="minisgl-")
    return {n: f"ipc://{os.path.join(root, n)}" for n in names}
