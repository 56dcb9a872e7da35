"""Adapter loads on a GPU: adapters loaded while decode batches replay in CUDA graphs (their shards
staged in pinned host memory and copied into the slot without waiting for the forward pass in
flight) serve peft's tokens, as do the requests that decoded beside the loads. Needs CUDA; skipped
without it (CI has no GPU); on the device machine: python -m pytest tests/lora/test_loader_cuda.py"""

from __future__ import annotations

import random

import pytest
import torch

from minisgl.core.params import SamplingParams
from minisgl.scheduler import Scheduler, SchedulerConfig
from tests.lora.peft_adapters import build_adapters, peft_greedy

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def test_adapters_loaded_while_decode_graphs_replay_give_peft_tokens(tiny_model_dir, tmp_path):
    model_dir = tiny_model_dir("Qwen3ForCausalLM")
    adapters = build_adapters(model_dir, tmp_path)
    s = Scheduler(SchedulerConfig(model_dir, device="cuda", dtype=torch.float32, attn="torch", page_size=4,
                                  num_pages=1024, max_running_requests=32, cuda_graph_max_bs=32,
                                  lora_modules={"r4": adapters["r4"]}, max_loras=3))
    replays = []
    replay = s.engine.graph_runner.replay
    s.engine.graph_runner.replay = lambda batch: replays.append(batch.size) or replay(batch)
    rng = random.Random(0)
    prompts = [[rng.randint(3, 380) for _ in range(rng.randint(1, 40))] for _ in range(16)]
    names = {}
    outputs = []

    def until_finished(uids) -> None:
        while any(not any(o.uid == u and o.finish_reason for o in outputs) for u in uids):
            outputs.extend(s.step())

    def add(uid: int, lora: str | None) -> None:
        names[uid] = lora
        s.add_request(uid, prompts[uid], SamplingParams(temperature=0, max_tokens=24, ignore_eos=True, lora=lora))

    try:
        for uid in range(8):  # decoding in graphs while r8 and r16 load
            add(uid, [None, "r4"][uid % 2])
        for _ in range(3):
            outputs.extend(s.step())
        s.update_lora(100, "r8", adapters["r8"])
        s.update_lora(101, "r16", adapters["r16"])
        until_finished([100, 101])
        assert [(o.finish_reason, o.error) for o in outputs if o.uid in (100, 101)] == [("stop", None)] * 2
        for uid in range(8, 16):
            add(uid, [None, "r4", "r8", "r16"][uid % 4])
        until_finished(range(16))
    finally:
        s.shutdown()
    assert replays, "no decode batch ran in a CUDA graph"
    for uid, lora in names.items():
        tokens = [o.token_id for o in outputs if o.uid == uid and o.token_id is not None]
        assert tokens == peft_greedy(model_dir, adapters.get(lora), prompts[uid], 24), (uid, lora)
