"""`python -m minisgl` / `minisgl`: serve a model over an OpenAI-compatible API, or chat in a shell."""

from __future__ import annotations

import atexit
import os
import sys


def run(argv: list[str] | None = None) -> int:
    """Serve (or open the shell) as the flags say; the exit status."""
    from minisgl.server.args import parse_args

    args = parse_args(argv)  # --version, --help and flag errors answer here, before torch is imported
    from minisgl.server.launch import run_shell, serve

    try:
        return run_shell(args) if args.shell else serve(args)
    except (ValueError, OSError) as e:  # a model that cannot be served as asked
        print(f"minisgl: error: {e}", file=sys.stderr)
        return 2


def main(argv: list[str] | None = None) -> None:
    exit_now(run(argv))


def exit_now(code: int) -> None:
    """Exit without the interpreter's teardown, which frees torch's and the app's objects one by one
    (seconds on a busy machine, while an orchestrator or an impatient operator waits). The exit
    handlers (multiprocessing's: its semaphores and children; logging's: flushing) still run."""
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    main()
