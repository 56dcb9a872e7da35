"""`python -m minisgl` / `minisgl`: serve a model over an OpenAI-compatible API, or chat in a shell."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    from minisgl.server.args import parse_args
    from minisgl.server.launch import run_shell, serve

    args = parse_args(argv)
    try:
        return run_shell(args) if args.shell else serve(args)
    except (ValueError, OSError) as e:  # a model that cannot be served as asked
        print(f"minisgl: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
