"""What the operator needs to know about the minisgl server, read from ``minisgl.server.args``.

``minisgl.server.args`` is the one place where the server's flags, defaults and probe paths live
(it imports only the standard library, so the operator image installs the minisgl package with
``pip install --no-deps``). Nothing here repeats a flag name, a default or a path as a literal.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Sequence

from minisgl.server import args as server_args

LIVENESS_PATH: str = server_args.LIVENESS_PATH
READINESS_PATH: str = server_args.READINESS_PATH
METRICS_PATH: str = server_args.METRICS_PATH
DEFAULT_PORT: int = server_args.DEFAULT_PORT
API_KEY_ENV: str = server_args.API_KEY_ENV
DEFAULT_DRAIN_TIMEOUT: float = server_args.defaults()["drain_timeout"]

_FIELDS = {f.name for f in dataclasses.fields(server_args.ServerArgs)}


def flag(field_name: str) -> str:
    """The command-line flag of a ServerArgs field, e.g. ``flag("drain_timeout") == "--drain-timeout"``."""
    if field_name not in _FIELDS:
        raise KeyError(f"minisgl.server.args.ServerArgs has no field {field_name!r}")
    return "--" + field_name.replace("_", "-")


FLAG_MODEL = flag("model")
FLAG_TP = flag("tp")
FLAG_HOST = flag("host")
FLAG_PORT = flag("port")
FLAG_DRAIN_TIMEOUT = flag("drain_timeout")
FLAG_SHELL = flag("shell")
FLAG_NNODES = flag("nnodes")
FLAG_NODE_RANK = flag("node_rank")
FLAG_DIST_INIT_ADDR = flag("dist_init_addr")
FLAG_LORA_MODULES = flag("lora_modules")
FLAG_MAX_LORAS = flag("max_loras")
FLAG_MAX_LORA_RANK = flag("max_lora_rank")

# Flags the operator sets from the spec; spec.args may not set them again (the adapters come from
# spec.adapters; their slots' count and rank from there too, unless spec.args sets them).
OWNED_FLAGS = (FLAG_MODEL, FLAG_TP, FLAG_HOST, FLAG_PORT, FLAG_NNODES, FLAG_NODE_RANK, FLAG_DIST_INIT_ADDR,
               FLAG_LORA_MODULES)
# Flags that make no sense in a pod (no HTTP server to probe).
FORBIDDEN_FLAGS = (FLAG_SHELL,)
# Inside a pod the server must listen on every interface.
POD_HOST = "0.0.0.0"
# The pod runs the server module itself, so the image's ENTRYPOINT does not matter (the
# Dockerfile's is this command plus --host 0.0.0.0).
SERVER_COMMAND = ("python", "-m", "minisgl")


class ServerArgsError(ValueError):
    """The server would refuse this command line."""


def _parser() -> argparse.ArgumentParser:
    """The server's own parser, made to raise instead of printing usage and exiting."""
    parser = server_args.build_parser()

    def error(message: str):
        raise ServerArgsError(message)

    parser.error = error  # type: ignore[method-assign]
    return parser


def fields_set_by(extra: Sequence[str]) -> set[str]:
    """The ServerArgs fields that ``extra`` sets, as the server's parser resolves them: argparse
    accepts any unambiguous prefix (``--t`` is ``--tp``, ``--por`` is ``--port``), so comparing
    the spelled flag names would let an abbreviation through."""
    parser = _parser()
    unset = object()
    parser.set_defaults(**{name: unset for name in _FIELDS})
    namespace = parser.parse_args(list(extra))
    return {name for name, value in vars(namespace).items() if value is not unset}


def check_extra_args(extra: Sequence[str]) -> None:
    """Reject spec.args that set a flag the operator owns or that the pod cannot use (spelled out
    or abbreviated), or that the server's parser refuses on their own."""
    dests = fields_set_by(extra)
    for flag_name in OWNED_FLAGS:
        if _dest(flag_name) in dests:
            raise ServerArgsError(f"{flag_name} comes from the InferenceService spec; do not repeat it in spec.args")
    for flag_name in FORBIDDEN_FLAGS:
        if _dest(flag_name) in dests:
            raise ServerArgsError(f"{flag_name} cannot run in a pod: the server must serve HTTP")


def _dest(flag_name: str) -> str:
    return flag_name[2:].replace("-", "_")


def parse_command_line(argv: Sequence[str]) -> server_args.ServerArgs:
    """Parse a full server command line exactly as the server will, or raise ServerArgsError."""
    namespace = _parser().parse_args(list(argv))
    values = vars(namespace)
    parsed = server_args.ServerArgs(**values)
    problem = server_args.validate(parsed)
    if problem:
        raise ServerArgsError(problem)
    return parsed


def command_line(model: str, tp: int, port: int, extra: Sequence[str]) -> list[str]:
    """The server's arguments in a pod: the spec's model, TP size and port, then spec.args."""
    return [FLAG_MODEL, model, FLAG_TP, str(tp), FLAG_HOST, POD_HOST, FLAG_PORT, str(port), *extra]


def adapter_flags(modules: Sequence[tuple[str, str]], max_loras: int | None, max_rank: int | None) -> list[str]:
    """The flags that serve LoRA adapters (name, path), in slots for ``max_loras`` adapters of rank up
    to ``max_rank`` (None: the server's default or spec.args' value)."""
    if not modules:
        return []
    flags = [FLAG_LORA_MODULES, *(f"{name}={path}" for name, path in modules)]
    if max_loras is not None:
        flags += [FLAG_MAX_LORAS, str(max_loras)]
    if max_rank is not None:
        flags += [FLAG_MAX_LORA_RANK, str(max_rank)]
    return flags


def node_flags(nnodes: int, node_rank: str, dist_init_addr: str) -> list[str]:
    """The flags that make one pod of a multi-node group: its place and node 0's rendezvous
    (``node_rank`` and the address may be $(VAR) references the kubelet expands)."""
    return [FLAG_NNODES, str(nnodes), FLAG_NODE_RANK, node_rank, FLAG_DIST_INIT_ADDR, dist_init_addr]
