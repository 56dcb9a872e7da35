"""The LoRA tests' shared fixtures (a pytest plugin of tests/conftest.py), named `lora_*` so that no
module's own `model_dir` or `scheduler` is shadowed by them or shadows them unnoticed:
`lora_model_dir`, a tiny random Qwen3; `lora_adapters`, peft adapters of ranks 4, 8 and 16 on it
(tests.lora.peft_adapters); `lora_scheduler`, a float32 CPU scheduler with two adapter slots and
r4 loaded at start."""

from __future__ import annotations

import pytest
import torch

from minisgl.scheduler import Scheduler, SchedulerConfig
from tests.lora.peft_adapters import build_adapters


@pytest.fixture(scope="module")
def lora_model_dir(tiny_model_dir):
    return tiny_model_dir("Qwen3ForCausalLM")


@pytest.fixture(scope="module")
def lora_adapters(lora_model_dir, tmp_path_factory):
    return build_adapters(lora_model_dir, tmp_path_factory.mktemp("lora"))


@pytest.fixture
def lora_scheduler(lora_model_dir, lora_adapters):
    s = Scheduler(SchedulerConfig(lora_model_dir, device="cpu", dtype=torch.float32, page_size=4, num_pages=128,
                                  lora_modules={"r4": lora_adapters["r4"]}, max_loras=2))
    yield s
    s.shutdown()
