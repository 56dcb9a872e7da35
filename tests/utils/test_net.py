"""Each run of the server gets fresh, private ipc:// addresses (minisgl.utils.net)."""

from __future__ import annotations

import os
import stat

from minisgl.utils.net import ipc_addresses


def test_ipc_addresses_are_fresh_and_in_a_private_directory():
    first, second = ipc_addresses(["a", "b"]), ipc_addresses(["a"])
    assert set(first) == {"a", "b"} and first["a"] != first["b"] and first["a"] != second["a"]
    directory = os.path.dirname(first["a"].removeprefix("ipc://"))
    assert stat.S_IMODE(os.stat(directory).st_mode) == 0o700
