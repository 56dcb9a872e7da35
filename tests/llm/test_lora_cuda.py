"""LoRA on a GPU: decode batches mixing adapters and the base model run in CUDA graphs (padded to a
captured size, the slot mask computed inside the graph) and give the CPU's tokens, which are peft's
(tests/llm/test_lora.py). Needs CUDA; skipped without it (CI has no GPU); on the device machine:
python -m pytest tests/llm/test_lora_cuda.py"""

from __future__ import annotations

import random

import pytest
import torch

from minisgl.core.params import SamplingParams
from minisgl.llm import LLM
from tests.lora.peft_adapters import build_adapters

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def _run(model_dir, adapters, prompts, params, names, **kwargs):
    llm = LLM(model_dir, dtype=torch.float32, page_size=4, max_prefill_length=512, max_running_requests=32,
              num_pages=1024, lora_modules=adapters, **kwargs)
    graphs = llm.scheduler.engine.graph_runner
    replays = []
    if graphs is not None:
        replay = graphs.replay
        graphs.replay = lambda batch: replays.append(batch.size) or replay(batch)
    try:
        return [o["token_ids"] for o in llm.generate(prompts, params, use_tqdm=False, lora=names)], replays
    finally:
        llm.shutdown()


@pytest.mark.parametrize("architecture", ["Qwen3ForCausalLM", "LlamaForCausalLM"])
def test_mixed_adapters_in_decode_graphs_equal_the_cpu(tiny_model_dir, tmp_path, architecture):
    model_dir = tiny_model_dir(architecture)
    adapters = build_adapters(model_dir, tmp_path)
    rng = random.Random(0)
    prompts = [[rng.randint(3, 380) for _ in range(rng.randint(1, 60))] for _ in range(20)]
    params = [SamplingParams(temperature=0, max_tokens=rng.randint(4, 24), ignore_eos=True) for _ in prompts]
    names = [[None, "r4", "r8", "r16"][i % 4] for i in range(len(prompts))]
    cpu, _ = _run(model_dir, adapters, prompts, params, names, device="cpu")
    gpu, replays = _run(model_dir, adapters, prompts, params, names, device="cuda", attn="torch",
                        cuda_graph_max_bs=32)
    assert min(replays) <= 16 < max(replays), f"graph sizes replayed: {sorted(set(replays))}"
    assert gpu == cpu
