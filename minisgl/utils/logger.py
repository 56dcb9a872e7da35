from __future__ import annotations

import logging

from . import env

_FORMAT = "[%(asctime)s %(levelname)s %(name)s] %(message)s"


def get_logger(name: str) -> logging.Logger:
    root = logging.getLogger("minisgl")
    if not root.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter(_FORMAT, "%H:%M:%S"))
        root.addHandler(handler)
        root.setLevel(env.LOG_LEVEL.get().upper())
        root.propagate = False
    return logging.getLogger(name if name.startswith("minisgl") else f"minisgl.{name}")
