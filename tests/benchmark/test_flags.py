"""The offline benchmarks take the server's engine flags from minisgl.server.args (add_flags: one
definition of each) and pass them to LLM(...) under the same names (minisgl.benchmark.flags)."""

from __future__ import annotations

import argparse
from dataclasses import fields

import torch

from minisgl.benchmark.flags import ENGINE_FLAGS, llm_kwargs
from minisgl.scheduler import SchedulerConfig
from minisgl.server.args import add_flags, build_parser


def _actions(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {a.dest: a for a in parser._actions}


def test_a_benchmark_flag_is_the_servers_with_its_help_choices_default_and_aliases():
    bench = argparse.ArgumentParser()
    add_flags(bench, ENGINE_FLAGS)
    server, ours = _actions(build_parser()), _actions(bench)
    for name in ENGINE_FLAGS:
        a, b = server[name], ours[name]
        assert (a.option_strings, a.help, a.choices, a.default, a.type) == (b.option_strings, b.help, b.choices,
                                                                             b.default, b.type), name


def test_a_benchmark_may_change_a_default_and_nothing_else():
    bench = argparse.ArgumentParser()
    add_flags(bench, ("dtype", "tp"), dtype="bfloat16")
    assert bench.parse_args([]).dtype == "bfloat16" and bench.parse_args([]).tp == 1
    assert bench.parse_args(["--tensor-parallel-size", "2"]).tp == 2  # the vLLM alias, as on the server
    assert set(vars(bench.parse_args([]))) == {"dtype", "tp"}


def test_the_values_reach_llm_under_the_config_fields_names():
    bench = argparse.ArgumentParser()
    add_flags(bench, ENGINE_FLAGS)
    args = bench.parse_args(["--dtype", "bf16", "--max-prefill-length", "512", "--attn", "torch", "--dummy-weight"])
    kwargs = llm_kwargs(args)
    assert set(kwargs) - {"tp"} <= {f.name for f in fields(SchedulerConfig)}  # LLM(model, tp=..., **config)
    assert kwargs["dtype"] is torch.bfloat16 and kwargs["max_prefill_length"] == 512
    assert kwargs["attn"] == "torch" and kwargs["dummy_weight"] is True
    assert llm_kwargs(bench.parse_args([]))["dtype"] is None  # auto: the checkpoint's
