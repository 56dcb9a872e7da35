"""The weight-streaming GEMV's tiles as measured on each GPU model: per shape, the fastest config
of `benchmark/offline/fp8_gemv.py`'s sweep on that GPU, written by its `--write-table`. One JSON
file per GPU model in gemv_tuned/, named after its CUDA device name. `gemv_config` takes a shape's
tiles from its GPU's table where there is one; elsewhere its rules, tuned on an H100, decide.
A table is read once a process, never timed at run time (a CUDA graph capture must not autotune).
"""

from __future__ import annotations

import functools
import json
import os
import re
from typing import Any

TABLE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gemv_tuned")
# What identifies a tile in a table: the rows rounded up to a power of two (the sweep's row counts:
# 1, 2, 4, 8, 16), the output features (for a gated weight its half), K, gated, weight bytes.
Key = tuple[int, int, int, bool, int]
CONFIG_FIELDS = ("block_n", "block_k", "num_warps", "num_stages", "dot")


def table_path(device_name: str, table_dir: str | None = None) -> str:
    """gemv_tuned/nvidia-h200.json for "NVIDIA H200" (in `table_dir`, else the package's)."""
    return os.path.join(table_dir or TABLE_DIR, re.sub(r"[^a-z0-9]+", "-", device_name.lower()).strip("-") + ".json")


def row_bucket(rows: int) -> int:
    return 1 << max(0, rows - 1).bit_length()


def tile_key(tile: dict[str, Any]) -> Key:
    """The key of a table's tile, or of a sweep's result ({rows, n, k, gated, weight_bytes, ...})."""
    return tile["rows"], tile["n"], tile["k"], tile["gated"], tile["weight_bytes"]


def read_table(path: str) -> dict[Key, dict[str, Any]]:
    with open(path) as f:
        tiles = json.load(f)["tiles"]
    return {tile_key(t): {name: t["config"][name] for name in CONFIG_FIELDS} for t in tiles}


@functools.cache
def device_table(device_name: str) -> dict[Key, dict[str, Any]]:
    """The table of `device_name`'s GPU model, empty where none was measured."""
    path = table_path(device_name)
    return read_table(path) if os.path.exists(path) else {}


def fastest_tiles(sweeps: list[dict[str, Any]], rule_us: dict[Key, float]) -> list[dict[str, Any]]:
    """Per shape, the fastest of its swept configs, where it beat the rules' config: `sweeps` holds
    {rows, n, k, gated, weight_bytes, config, us} each (n: for a gated weight its half); `rule_us`,
    the rules' config's time by key."""
    best: dict[Key, dict[str, Any]] = {}
    for r in sweeps:
        if r["rows"] != row_bucket(r["rows"]):  # looked up by rows rounded up to a power of two
            continue
        key = tile_key(r)
        if key not in best or r["us"] < best[key]["us"]:
            best[key] = r
    # A shape whose rules' config (not always in the sweep's grid) was as fast stays with the rules.
    return [{"rows": r["rows"], "n": r["n"], "k": r["k"], "gated": r["gated"], "weight_bytes": r["weight_bytes"],
             "config": {name: r["config"][name] for name in CONFIG_FIELDS}, "us": r["us"], "rule_us": rule_us.get(key)}
            for key, r in sorted(best.items()) if key not in rule_us or r["us"] < rule_us[key]]


def write_table(path: str, device_name: str, tiles: list[dict[str, Any]], swept: set[Key] | None = None) -> None:
    """`tiles`: {rows, n, k, gated, weight_bytes, config (CONFIG_FIELDS), us, rule_us} each. In a
    table already at `path` they replace the tiles of every shape swept (`swept`, default the
    tiles' own: a swept shape the rules won drops its old tile) and keep the others, so sweeps at
    different row counts (each within one device call's time) build up one table."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    if os.path.exists(path):
        replaced = (swept or set()) | {tile_key(t) for t in tiles}
        with open(path) as f:
            kept = [t for t in json.load(f)["tiles"] if tile_key(t) not in replaced]
        tiles = sorted(kept + tiles, key=tile_key)
    with open(path, "w") as f:
        json.dump({"device": device_name, "written_by": "benchmark/offline/fp8_gemv.py or bf16_gemv.py --write-table",
                   "tiles": tiles}, f, indent=1)
        f.write("\n")
