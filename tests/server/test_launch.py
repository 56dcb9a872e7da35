"""One name per setting: a scheduler/engine config field and the server flag that sets it have the
same name, and `scheduler_config` copies each such flag by that name. Only the fields the launcher
computes (where the model is, which rank, the rendezvous) have no flag. And the launcher starts its
workers before it imports torch, and its HTTP side imports none."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import fields, replace

import pytest
import torch

from minisgl.distributed import DistributedInfo
from minisgl.scheduler import SchedulerConfig
from minisgl.server.args import ServerArgs
from minisgl.server.runtime.workers import scheduler_config

# Config fields no flag sets: given by the launcher (model_path, tp_info from --tp and the rank,
# distributed_addr), only by offline callers and tests (cuda_graph_bs, overlap), or computed at start
# (record_hidden_layers, from the --draft-model head).
FLAGLESS_CONFIG_FIELDS = {"model_path", "tp_info", "distributed_addr", "cuda_graph_bs", "overlap", "record_hidden_layers"}
# Same-named fields whose config value is converted from the flag's (checked below on their own).
CONVERTED = {"dtype"}

SHARED = sorted({f.name for f in fields(SchedulerConfig)} & {f.name for f in fields(ServerArgs)})


def _non_default(name: str, index: int):
    """A value of flag `name` other than its default, different for every flag (so that two flags
    swapped in the mapping would be caught)."""
    f = next(f for f in fields(ServerArgs) if f.name == name)
    choices = f.metadata.get("choices")
    if choices:
        return next(c for c in choices if c != f.default)
    kind = str(f.type).split(" ")[0]
    if kind == "bool":
        return not f.default
    if kind == "int":
        return 1000 + index
    if kind == "float":
        return 0.5 + index / 1000
    return f"value-of-{name}"


def test_every_config_field_but_the_computed_ones_has_a_flag_of_the_same_name():
    flagless = {f.name for f in fields(SchedulerConfig)} - {f.name for f in fields(ServerArgs)}
    assert flagless == FLAGLESS_CONFIG_FIELDS, (
        "a SchedulerConfig/EngineConfig field must be named after its ServerArgs flag; "
        f"fields without a flag: {sorted(flagless)}")


def test_the_names_that_used_to_differ_are_now_shared():
    assert {"max_running_requests", "attn", "max_seq_len", "num_pages", "dummy_weight", "max_prefill_length",
            "cache", "moe_backend"} <= set(SHARED)


def test_each_flag_sets_the_config_field_of_its_name():
    assert len(SHARED) > 10
    values = {name: _non_default(name, i) for i, name in enumerate(SHARED) if name not in CONVERTED}
    defaults = ServerArgs()
    assert all(getattr(defaults, name) != value for name, value in values.items())
    config = scheduler_config(replace(defaults, **values), "/models/m")
    assert {name: getattr(config, name) for name in values} == values


@pytest.mark.parametrize("flag, dtype", [("auto", None), ("bfloat16", torch.bfloat16), ("float16", torch.float16),
                                         ("float32", torch.float32)])
def test_dtype_flag_becomes_a_torch_dtype_and_auto_the_checkpoints(flag, dtype):
    assert scheduler_config(ServerArgs(dtype=flag), "m").dtype is dtype


def test_launcher_fields_come_from_the_model_path_the_rank_and_the_rendezvous():
    config = scheduler_config(ServerArgs(tp=4), "/models/m", rank=3, distributed_addr="tcp://h:29500")
    assert (config.model_path, config.tp_info, config.distributed_addr) == (
        "/models/m", DistributedInfo(3, 4), "tcp://h:29500")


def test_the_launcher_imports_no_torch_before_it_spawns_the_workers():
    """The workers import torch and the engine while the launcher checks the model: a pod's start
    waits for the slower of the two, not for both one after the other."""
    run = subprocess.run([sys.executable, "-X", "importtime", "-c",
                          "import minisgl.server.launch, minisgl.server.runtime.connections"],
                         capture_output=True, text=True, timeout=120)
    imported = {line.rsplit("|", 1)[1].strip() for line in run.stderr.splitlines() if line.startswith("import time:")}
    assert run.returncode == 0 and "minisgl.server.runtime.workers" in imported, run.stderr[-2000:]
    assert "torch" not in imported and "transformers" not in imported


def test_the_api_process_never_imports_torch_or_transformers():
    """Its HTTP side and the model's context length (which the schedulers' check reports) take
    neither: importing torch would cost each server start seconds of CPU for nothing."""
    run = subprocess.run([sys.executable, "-c", "import sys; from minisgl.server.launch import _import_http; "
                          "_import_http(); print(sorted({'torch', 'transformers', 'numpy'} & set(sys.modules)))"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip() == "[]"
