"""Tiles measured per GPU model (minisgl.kernels.gemv_tuned): the sweep's fastest config per shape
becomes that GPU's table, and gemv_config takes a shape's tiles from its GPU's table (rows rounded
up to the sweep's powers of two), falling back to its rules for every shape the table lacks and off
a GPU. The GEMV computes right with the tiles a table gives. No GPU here: the GPU's name is what a
CUDA device reports, set for the test."""

from __future__ import annotations

import glob
import json
import os

import pytest
import torch

pytest.importorskip("triton")

import minisgl.kernels.gemv as gemv_module  # noqa: E402
from minisgl.kernels import gemv_tuned  # noqa: E402
from minisgl.kernels.gemv import GemvConfig, gemv, gemv_config  # noqa: E402
from tests.kernels.test_gemv import check  # noqa: E402

ODD = {"block_n": 16, "block_k": 32, "num_warps": 2, "num_stages": 2, "dot": False}  # no rule picks it


def sweep(rows, n, k, us, gated=False, **config):
    return {"rows": rows, "n": n, "k": k, "gated": gated, "weight_bytes": 1, "us": us, "config": {**ODD, **config}}


def test_a_table_is_named_after_the_gpu_model():
    assert gemv_tuned.table_path("NVIDIA H200", "/t") == "/t/nvidia-h200.json"
    assert gemv_tuned.table_path("NVIDIA H100 80GB HBM3", "/t") == "/t/nvidia-h100-80gb-hbm3.json"


def test_the_fastest_swept_config_of_each_shape_is_kept_with_the_rules_time_beside_it():
    sweeps = [sweep(1, 4096, 4096, 9.0, block_n=8), sweep(1, 4096, 4096, 7.5, block_n=4),
              sweep(1, 4096, 4096, 8.0, block_n=16), sweep(2, 4096, 4096, 11.0),
              sweep(1, 14336, 4096, 20.0, gated=True), sweep(3, 4096, 4096, 1.0)]  # 3 rows: not a bucket
    tiles = gemv_tuned.fastest_tiles(sweeps, {(1, 4096, 4096, False, 1): 8.5})
    assert [(t["rows"], t["n"], t["gated"], t["us"]) for t in tiles] == [
        (1, 4096, False, 7.5), (1, 14336, True, 20.0), (2, 4096, False, 11.0)]
    assert tiles[0]["config"]["block_n"] == 4 and tiles[0]["rule_us"] == 8.5
    assert tiles[1]["rule_us"] is None


def test_a_shape_where_the_rules_config_was_as_fast_is_left_to_the_rules():
    tiles = gemv_tuned.fastest_tiles([sweep(8, 4096, 4096, 12.1), sweep(1, 4096, 4096, 7.0)],
                                     {(8, 4096, 4096, False, 1): 11.5, (1, 4096, 4096, False, 1): 7.4})
    assert [(t["rows"], t["us"]) for t in tiles] == [(1, 7.0)]


def test_a_sweep_at_other_rows_adds_to_the_table_and_replaces_only_the_shapes_it_swept(tmp_path):
    path = gemv_tuned.table_path("Test GPU 9000", str(tmp_path))
    gemv_tuned.write_table(path, "Test GPU 9000", gemv_tuned.fastest_tiles(
        [sweep(1, 96, 200, 5.0, block_n=4), sweep(1, 40, 96, 5.0, block_n=4)], {}))
    gemv_tuned.write_table(path, "Test GPU 9000", gemv_tuned.fastest_tiles(
        [sweep(2, 96, 200, 6.0, block_n=8), sweep(1, 40, 96, 4.0, block_n=16)], {}))
    table = gemv_tuned.read_table(path)
    assert {key: c["block_n"] for key, c in table.items()} == {
        (1, 96, 200, False, 1): 4, (1, 40, 96, False, 1): 16, (2, 96, 200, False, 1): 8}
    # Swept again, the rules won this shape: its old tile goes, and the rules decide it.
    gemv_tuned.write_table(path, "Test GPU 9000", [], swept={(1, 40, 96, False, 1)})
    assert set(gemv_tuned.read_table(path)) == {(1, 96, 200, False, 1), (2, 96, 200, False, 1)}


@pytest.fixture
def gpu_with_table(tmp_path, monkeypatch):
    """A GPU named "Test GPU 9000" whose table holds ODD for 1-row [96, 200] and 16-row gated [40, 96]."""
    tiles = gemv_tuned.fastest_tiles([sweep(1, 96, 200, 1.0), sweep(16, 40, 96, 1.0, gated=True, dot=True)], {})
    gemv_tuned.write_table(gemv_tuned.table_path("Test GPU 9000", str(tmp_path)), "Test GPU 9000", tiles)
    monkeypatch.setattr(gemv_tuned, "TABLE_DIR", str(tmp_path))
    monkeypatch.setattr(gemv_module, "cuda_device_name", lambda device=None: "Test GPU 9000")
    gemv_tuned.device_table.cache_clear()
    yield
    gemv_tuned.device_table.cache_clear()


def test_gemv_config_takes_the_gpus_measured_tiles_and_its_rules_elsewhere(gpu_with_table):
    assert gemv_config(1, 96, 200) == GemvConfig(**ODD)
    assert gemv_config(9, 40, 96, gated=True) == GemvConfig(**{**ODD, "dot": True})  # 9 rows: the 16-row tiles
    assert gemv_config(2, 96, 200) != GemvConfig(**ODD)  # a row count the table lacks: the rules
    assert gemv_config(1, 96, 200, weight_bytes=2) != GemvConfig(**ODD)  # a bf16 weight: not swept


def test_off_a_gpu_or_without_a_table_the_rules_decide(gpu_with_table, monkeypatch):
    monkeypatch.setattr(gemv_module, "cuda_device_name", lambda device=None: "Another GPU")
    assert gemv_config(1, 96, 200) != GemvConfig(**ODD)
    monkeypatch.setattr(gemv_module, "cuda_device_name", lambda device=None: None)
    assert gemv_config(1, 96, 200) != GemvConfig(**ODD)


@pytest.mark.parametrize(("rows", "n", "k", "gated"), [(1, 96, 200, False), (12, 40, 96, True)])
def test_the_gemv_computes_right_with_a_tables_tiles(gpu_with_table, rows, n, k, gated):
    check(rows, n, k, gated)


SHIPPED = [(os.path.basename(path), tile) for path in sorted(glob.glob(os.path.join(gemv_tuned.TABLE_DIR, "*.json")))
           for tile in json.load(open(path))["tiles"]]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize(("table", "tile"), SHIPPED, ids=[
    f"{table}-{t['rows']}x{t['n']}x{t['k']}-{'gated' if t['gated'] else 'plain'}-{t['weight_bytes']}B" for table, t in SHIPPED])
def test_every_shipped_tile_computes_right_at_its_shape(table, tile):
    """The tiles a table ships were picked for speed alone: each must also compute right."""
    rows, n, k, config = tile["rows"], tile["n"], tile["k"], GemvConfig(**tile["config"])
    if tile["weight_bytes"] == 1:
        check(rows, n, k, tile["gated"], config)
        return
    torch.manual_seed(rows + n + k)
    x = torch.randn(rows, k, dtype=torch.bfloat16, device="cuda")
    w = torch.randn(n, k, dtype=torch.bfloat16, device="cuda") * 0.05
    want = x.float() @ w.float().T
    assert torch.allclose(gemv(x, w, config=config).float(), want, rtol=1e-2, atol=1e-2 * want.abs().max().item())
