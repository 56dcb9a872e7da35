"""On a machine with two or more GPUs: TP over NCCL (and the custom NVLink all-reduce for small
messages) gives TP=1's greedy tokens for every architecture in float32, with CUDA graphs; bf16 TP
runs complete. TP sizes come from the GPU count (2, and 4 where four GPUs exist: the tiny models'
2 KV heads are then replicated), or from MINISGL_TEST_TP (e.g. "2,4").

Each case runs in its own process session (tests/distributed/isolation.py): its own process group
and rendezvous, and a failed case's ranks are killed rather than left to break the next case.
Skipped without two GPUs: CI has none; benchmark/device/tp.sh runs it (see benchmark/NOTES.md).
"""

from __future__ import annotations

import functools
import os

import pytest
import torch

from minisgl.core.params import SamplingParams
from tests.conftest import ARCHITECTURES
from tests.distributed.isolation import run_isolated

GPUS = torch.cuda.device_count()
pytestmark = pytest.mark.skipif(GPUS < 2, reason="needs 2 CUDA devices")
TP_SIZES = ([int(t) for t in os.environ["MINISGL_TEST_TP"].split(",")] if os.environ.get("MINISGL_TEST_TP")
            else [t for t in (2, 4) if t <= GPUS])
PROMPTS = [[5, 17, 42, 99, 3], list(range(10, 47)), [300], [7] * 20]


def greedy(model_dir: str, tp: int, dtype: torch.dtype = torch.float32, options: dict | None = None) -> list[list[int]]:
    """Runs in the case's own process (run_isolated): `options` are further LLM keyword arguments.
    Graphs up to batch 8 (the 4 prompts decode inside them) keep each start short."""
    from minisgl.llm import LLM

    llm = LLM(model_dir, tp=tp, device="cuda", dtype=dtype, num_pages=512, page_size=16,
              **{"cuda_graph_max_bs": 8, **(options or {})})
    try:
        outs = llm.generate(PROMPTS, SamplingParams(temperature=0, max_tokens=24, ignore_eos=True), use_tqdm=False)
        return [o["token_ids"] for o in outs]
    finally:
        llm.shutdown()


@functools.cache
def tp1_reference(model_dir: str) -> list[list[int]]:
    return run_isolated(greedy, model_dir, 1)


def first_differences(got: list[list[int]], want: list[list[int]]) -> dict[int, int]:
    """Where each prompt first diverges, so a failure on the device says more than "lists differ"."""
    return {i: next((j for j, (a, b) in enumerate(zip(x, y)) if a != b), min(len(x), len(y)))
            for i, (x, y) in enumerate(zip(got, want)) if x != y}


@pytest.mark.parametrize("tp", TP_SIZES)
@pytest.mark.parametrize("architecture", ARCHITECTURES)
def test_tensor_parallel_matches_tp1_in_float32(tiny_model_dir, architecture, tp):
    model_dir = tiny_model_dir(architecture)
    want = tp1_reference(model_dir)
    got = run_isolated(greedy, model_dir, tp)
    diverged = first_differences(got, want)
    assert not diverged, f"first differing token per prompt: {diverged}; tp{tp}={got}; tp1={want}"


def test_qwen3_moe_tp2_matches_tp1_with_every_all_reduce_on_nccl(tiny_model_dir):
    model_dir = tiny_model_dir("Qwen3MoeForCausalLM")
    want = tp1_reference(model_dir)
    got = run_isolated(greedy, model_dir, 2, torch.float32, {"disable_custom_all_reduce": True})
    assert not first_differences(got, want), f"tp2={got}; tp1={want}"


def test_bf16_qwen3_moe_grouped_gemm_runs_inside_cuda_graphs(tiny_model_dir):
    """The grouped-GEMM path (bf16 on Hopper: no host sync) captured in the decode graphs."""
    outs = run_isolated(greedy, tiny_model_dir("Qwen3MoeForCausalLM"), 2, torch.bfloat16, {"moe_backend": "grouped"})
    assert [len(o) for o in outs] == [24] * len(PROMPTS)


@pytest.mark.parametrize("tp", TP_SIZES)
@pytest.mark.parametrize("architecture", ["Qwen3ForCausalLM", "Qwen3MoeForCausalLM", "LlamaForCausalLM"])
def test_bf16_tensor_parallel_runs_complete(tiny_model_dir, architecture, tp):
    outs = run_isolated(greedy, tiny_model_dir(architecture), tp, torch.bfloat16)
    assert [len(o) for o in outs] == [24] * len(PROMPTS)
