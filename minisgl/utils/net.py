from __future__ import annotations

import socket


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now (the OS picks it)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def free_tcp_addr() -> str:
    """A tcp:// rendezvous address on loopback, e.g. for torch.distributed."""
    return f"tcp://127.0.0.1:{free_port()}"
