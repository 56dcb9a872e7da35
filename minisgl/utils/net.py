from __future__ import annotations

import socket


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now (the OS picks it)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def rendezvous_addr() -> str:
    """A fresh file:// rendezvous for torch.distributed's ranks on this machine. A file, not a free
    TCP port: between picking a port and binding it, NCCL's own connections can take it."""
    import os
    import tempfile

    return "file://" + os.path.join(tempfile.mkdtemp(prefix="minisgl-rdzv-"), "init")
