"""The benchmarks' workload: a named size (--workload), each of its fields overridable on the
command line, and reruns with fresh prompt ids that find nothing in the prefix cache."""

from __future__ import annotations

import argparse
import random

import pytest

from minisgl.benchmark.workload import (
    WORKLOADS,
    add_workload_flags,
    fresh_ids,
    offline_workload,
    workload_requests,
    workload_settings,
    workload_size,
)


def parse(argv: list[str], default: str = "field") -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_workload_flags(p, default)
    return p.parse_args(argv)


def test_the_fields_offline_workload_is_the_default_and_is_nano_vllms():
    """nano-vllm's bench.py, written out: seed 0, 256 requests, prompt and output lengths in [100, 1024]."""
    rng = random.Random(0)
    prompts = [[rng.randint(0, 10000) for _ in range(rng.randint(100, 1024))] for _ in range(256)]
    outputs = [rng.randint(100, 1024) for _ in range(256)]
    prompt_ids, params = workload_requests(parse([]), vocab_size=10001)
    assert prompt_ids == prompts and [p.max_tokens for p in params] == outputs


def test_the_serving_workloads_send_at_least_1024_requests_and_long_has_longer_outputs():
    serving, long = WORKLOADS["serving"], WORKLOADS["long"]
    assert serving.num_requests >= 1024 and long.num_requests >= 1024
    assert long.max_output_len > serving.max_output_len
    outputs = [r.max_tokens for r in offline_workload(long.num_requests, long.max_input_len, long.max_output_len)]
    assert 900 <= sum(outputs) / len(outputs) <= 1200  # outputs of about 1,024 tokens


def test_a_field_given_on_the_command_line_replaces_the_named_sizes():
    args = parse(["--workload", "long", "--num-requests", "8"], default="serving")
    long = WORKLOADS["long"]
    assert (workload_size(args).num_requests, workload_size(args).max_output_len) == (8, long.max_output_len)
    assert workload_settings(args) == {"workload": "long", "num_requests": 8, "max_input_len": long.max_input_len,
                                       "max_output_len": long.max_output_len, "temperature": 0.6}
    prompts, params = workload_requests(args, vocab_size=1000)
    assert len(prompts) == len(params) == 8 and all(p.ignore_eos for p in params)


def test_an_unknown_workload_is_refused(capsys):
    with pytest.raises(SystemExit) as e:
        parse(["--workload", "huge"])
    assert e.value.code == 2 and "--workload" in capsys.readouterr().err


def test_fresh_ids_keep_every_length_and_share_no_prompt():
    prompts = [r.prompt_ids for r in offline_workload(16, 64, 8, vocab_size=500)]
    again = fresh_ids(prompts, seed=1, vocab_size=500)
    assert [len(p) for p in again] == [len(p) for p in prompts]
    assert all(a != p for a, p in zip(again, prompts)) and all(0 <= t < 500 for p in again for t in p)
    assert fresh_ids(prompts, seed=1, vocab_size=500) == again != fresh_ids(prompts, seed=2, vocab_size=500)
