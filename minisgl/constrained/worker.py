"""A grammar compile worker: `python -m minisgl.constrained.worker PARENT_PID FD`.

Its own process, so a compile that runs away can be killed at its time budget and never holds the
scheduler's GIL or its CPU. It speaks over the connection FD (a socket pair; pickled tuples):

    worker -> ("started",)                 after its imports
    pool   -> {model_path, vocab_size, stop_token_ids, tokenizer_info}  (tokenizer_info: JSON or None)
    worker -> ("ready", info JSON or None)  the tokenizer info it built, when it was given none
    pool   -> (job, kind, spec)             then, for each:
    worker -> (job, True, compiled JSON) or (job, False, why it cannot compile)

and ("failed", why) before it exits on anything else (a tokenizer that does not load).
"""

from __future__ import annotations

import os
import signal
import sys
from multiprocessing.connection import Connection

from minisgl.utils.process import end_with

from .grammar import CONSTRAINT_FIELDS, compile_constraint
from .matching_cost import matching_problem

# The languages a client writes itself, where an ambiguous rule can hide (xgrammar writes the
# grammars of JSON schemas and choices, unambiguously).
PROBED_KINDS = ("grammar", "regex")


def serve(conn: Connection) -> None:
    conn.send(("started",))
    setup = conn.recv()
    import xgrammar as xgr

    info_json = setup["tokenizer_info"]
    if info_json is None:  # the pool's first worker: every later one gets this one's
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(setup["model_path"])
        info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=setup["vocab_size"],
                                                  stop_token_ids=setup["stop_token_ids"])
        conn.send(("ready", info.serialize_json()))
    else:
        info = xgr.TokenizerInfo.deserialize_json(info_json)
        conn.send(("ready", None))
    # The pool caches compiled grammars itself, by their text; this process keeps none.
    compiler = xgr.GrammarCompiler(info, max_threads=1, cache_enabled=False)
    while True:
        try:
            job, kind, spec = conn.recv()
        except EOFError:  # the pool is gone
            return
        try:
            compiled = compile_constraint(compiler, (kind, spec))
            if kind in PROBED_KINDS:
                problem = matching_problem(compiled, setup["vocab_size"], setup["stop_token_ids"])
                if problem:
                    raise ValueError(f"cannot compile the {kind} constraint ({CONSTRAINT_FIELDS[kind]}): {problem}")
            payload = compiled.serialize_json()
            held = held_bytes(compiled, payload)
            if held > setup["max_bytes"]:  # what the scheduler would hold, for every request that uses it
                raise ValueError(f"cannot compile the {kind} constraint ({CONSTRAINT_FIELDS[kind]}): compiled, it holds "
                                 f"{held / 2**20:.1f} MiB of token masks, more than this server's limit of "
                                 f"{setup['max_bytes'] / 2**20:.1f} MiB (--grammar-cache-bytes); simplify it (fewer or "
                                 "shorter bounded fields)")
            conn.send((job, True, payload))
        except ValueError as e:
            conn.send((job, False, str(e)))


def held_bytes(compiled, payload: str) -> int:
    """What a compiled grammar holds once deserialized: its serialized size, which follows its token
    masks (memory_size_bytes leaves most of them out: benchmark/NOTES.md), or memory_size_bytes where
    that says more (small grammars, as xgrammar counts them since 0.2.9)."""
    return max(len(payload), compiled.memory_size_bytes)


def main(argv: list[str]) -> None:
    parent, fd = int(argv[0]), int(argv[1])
    end_with(parent, signal.SIGKILL)  # never outlives the pool's thread, however that ends
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the group; the launcher decides
    conn = Connection(fd)
    try:
        serve(conn)
    except (EOFError, BrokenPipeError, ConnectionResetError):
        pass  # the pool closed the connection: nothing left to do
    except Exception as e:  # noqa: BLE001 -- the pool reports it
        conn.send(("failed", f"{type(e).__name__}: {e}"))


if __name__ == "__main__":
    main(sys.argv[1:])
    os._exit(0)  # skip interpreter teardown of torch and friends
