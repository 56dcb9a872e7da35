"""The Engine as the seed design documents it (Mini-SGLang's Engine page): its example runs as
written, with a tiny local model in place of the hub's, and the engine has the attributes the page
lists."""

from __future__ import annotations

import torch

from minisgl.distributed import DistributedInfo
from minisgl.engine import Engine, EngineConfig


def test_the_seeds_engine_example_runs_as_written(tiny_model_dir):
    model_path = tiny_model_dir("Qwen3ForCausalLM")

    # -- the seed's code, unchanged but for model_path --
    config = EngineConfig(
        model_path=model_path,
        dtype=torch.bfloat16,
        tp_info=DistributedInfo(rank=0, size=1),
        page_size=16,
        max_running_req=128,
    )

    engine = Engine(config)
    # --
    try:
        for name in ("model", "kv_cache", "page_table", "attn_backend", "moe_backend", "sampler", "graph_runner",
                     "ctx"):
            assert hasattr(engine, name), name
        assert engine.moe_backend is None  # a dense model
        # "Shape: (max_running_req + 1, aligned_max_seq_len)"
        rows, width = engine.page_table.shape
        assert rows == config.max_running_req + 1 == 129 and width % config.page_size == 0
        assert engine.model.model.embed_tokens.weight.dtype == torch.bfloat16
    finally:
        engine.shutdown()


def test_the_seeds_other_settings_are_accepted_by_their_names(tiny_model_dir):
    config = EngineConfig(
        model_path=tiny_model_dir("Qwen3ForCausalLM"),
        dtype=torch.float32,
        tp_info=DistributedInfo(rank=0, size=1),
        cuda_graph_bs=[1, 2, 4, 8, 16, 32],  # Capture these batch sizes
        cuda_graph_max_bs=64,  # Maximum batch size for graph
        num_page_override=40,
        distributed_addr="tcp://localhost:12345",
        device="cpu",
    )
    engine = Engine(config)
    try:
        assert engine.num_pages == config.num_page_override == config.num_pages == 40
        assert engine.graph_runner is None  # CUDA graphs exist only on a GPU
    finally:
        engine.shutdown()
