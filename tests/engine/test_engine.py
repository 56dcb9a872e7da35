"""Engine-level behaviour outside model parity: sizing, device choice, bad requests."""

from __future__ import annotations

import pytest
import torch

from minisgl.engine import resolve_device
from tests.helpers import EngineDriver, cpu_engine


@pytest.fixture()
def engine(tiny_model_dir):
    with cpu_engine(tiny_model_dir("Qwen3ForCausalLM"), max_seq_len=64, page_size=8, max_running_requests=4,
                    num_pages=40) as e:
        yield e


def test_over_long_request_fails_clearly(engine):
    driver = EngineDriver(engine)
    req = driver.add(list(range(1, 70)), max_len=64)
    with pytest.raises(ValueError, match=r"needs 69 tokens, beyond max_seq_len 64"):
        driver.step([req])


def test_max_seq_len_override_and_page_table_shape(engine):
    assert engine.max_seq_len == 64
    assert engine.page_table.shape == (5, 64)  # max_running_requests + 1 dummy row
    assert engine.kv_cache.k_buffer.shape == (2, 40 * 8, 2, 16)


def test_kv_pool_sized_from_memory_on_cpu(tiny_model_dir):
    with cpu_engine(tiny_model_dir("Qwen3ForCausalLM"), dtype=None, max_seq_len=128, page_size=16,
                    max_running_requests=3) as e:
        assert e.num_pages == 3 * 128 // 16  # every request at full length, well within RAM


def test_device_choice():
    assert resolve_device("cpu").type == "cpu"
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    with pytest.raises(ValueError, match="unknown device"):
        resolve_device("tpu")
