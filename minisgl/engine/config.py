from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import ClassVar

import torch

from minisgl.distributed import DistributedInfo
from minisgl.utils.choices import DEVICES, DTYPES


def accepts_seed_names(cls):
    """Let `cls(...)` take, and its instances answer to, the names in `cls.SEED_NAMES` (Mini-SGLang's
    for the same settings), so code written against the seed design runs as written."""
    init = cls.__init__

    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        for seed_name, name in cls.SEED_NAMES.items():
            if seed_name in kwargs:
                if name in kwargs:
                    raise TypeError(f"{seed_name} and {name} are the same setting; pass {name} only")
                kwargs[name] = kwargs.pop(seed_name)
        init(self, *args, **kwargs)

    def __getattr__(self, name):  # only called for names that are not fields
        if name in cls.SEED_NAMES:
            return getattr(self, cls.SEED_NAMES[name])
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    cls.__init__, cls.__getattr__ = __init__, __getattr__
    return cls


@accepts_seed_names
@dataclass(frozen=True)
class EngineConfig:
    # Mini-SGLang's name -> ours (the flags' names: --max-running-requests, --num-pages, ...).
    SEED_NAMES: ClassVar[dict[str, str]] = {
        "max_running_req": "max_running_requests",
        "num_page_override": "num_pages",
        "max_seq_len_override": "max_seq_len",
        "use_dummy_weight": "dummy_weight",
        "attention_backend": "attn",
    }

    model_path: str
    tp_info: DistributedInfo = DistributedInfo()
    dtype: torch.dtype | None = None  # None: the checkpoint's dtype
    device: str = "auto"  # auto: CUDA when present, else CPU
    page_size: int = 16
    kv_cache_dtype: str = "auto"  # auto (the model's dtype), fp8_e4m3 or fp8_e5m2: minisgl.kvcache.KV_CACHE_DTYPES
    quantization: str | None = None  # "fp8": quantize plain weights at load (minisgl.quantization)
    max_running_requests: int = 256
    attn: str = "auto"  # a name, or "prefill,decode"
    moe_backend: str = "auto"  # auto (per batch size on CUDA, loop on the CPU), loop, grouped or fused
    cuda_graph_bs: tuple[int, ...] | None = None
    cuda_graph_max_bs: int | None = None  # 0 turns CUDA graphs off (decode and prefill)
    # Prefill batches up to this many tokens replay piecewise CUDA graphs (minisgl.engine.prefill_graph),
    # at most the scheduler's max_prefill_length; 0: none (the default: benchmark/NOTES.md says why).
    piecewise_cuda_graph_max_tokens: int = 0
    memory_ratio: float = 0.9
    dummy_weight: bool = False
    max_seq_len: int | None = None
    num_pages: int | None = None
    distributed_addr: str = "tcp://127.0.0.1:23333"
    disable_custom_all_reduce: bool = False  # True: NCCL for every all-reduce (see minisgl.distributed.custom_allreduce)
    # LoRA adapters (minisgl.lora): name -> PEFT adapter directory (or the flag's name=path strings),
    # loaded at start into a pool of max_loras slots (None: one per named adapter) of rank max_lora_rank.
    lora_modules: dict[str, str] | tuple[str, ...] | None = None
    max_loras: int | None = None
    max_lora_rank: int = 16
    # Layers whose incoming residual stream every forward pass records, CUDA graphs included
    # (minisgl.models.decoder.record_hidden): an EAGLE-3 draft head reads them. () records none.
    record_hidden_layers: tuple[int, ...] = ()


def _either(names: tuple[str, ...]) -> str:
    return f"{', '.join(names[:-1])} or {names[-1]}"


def resolve_dtype(name: str) -> torch.dtype | None:
    """The --dtype flag's value (aliases already resolved) as the config's: None for auto."""
    if name == "auto":
        return None
    if name not in DTYPES:
        raise ValueError(f"unknown dtype {name!r}; use {_either(DTYPES)}")
    return getattr(torch, name)


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("device 'cuda' was asked for, but no CUDA device is visible")
    if name not in DEVICES:
        raise ValueError(f"unknown device {name!r}; use {_either(DEVICES)}")
    return torch.device(name)


def resolve_moe_backend(name: str, device: torch.device) -> str:
    """auto: on CUDA the per-batch-size choice of fused Triton / grouped GEMM (see
    minisgl.layers.moe), the per-expert loop on the CPU."""
    from minisgl.layers.moe import BACKENDS

    if name not in BACKENDS:
        raise ValueError(f"unknown MoE backend {name!r}; use {', '.join(BACKENDS)}")
    if name == "auto" and device.type != "cuda":
        return "loop"
    return name


def check_moe_backend_dtype(backend: str, device: torch.device, dtype: torch.dtype) -> None:
    """PyTorch's grouped GEMM runs on the device only for bfloat16 on CUDA; for other dtypes it
    reads the expert offsets back to the host, which a CUDA graph cannot capture."""
    if backend == "grouped" and device.type == "cuda" and dtype != torch.bfloat16:
        raise ValueError(f"--moe-backend grouped on CUDA needs bfloat16 (the model runs in "
                         f"{str(dtype).removeprefix('torch.')}); use fused or auto")


def validate_tp(model_config, tp_size: int, device: torch.device, local_ranks: int | None = None) -> None:
    """Fail at start, with the reason, when the model cannot be split over `tp_size` ranks, of which
    `local_ranks` (default: all) run on this machine and need a GPU here."""
    cfg = model_config
    if tp_size < 1:
        raise ValueError("tensor-parallel size must be >= 1")
    if cfg.num_heads % tp_size:
        raise ValueError(f"--tp {tp_size} must divide the model's {cfg.num_heads} attention heads")
    if cfg.num_kv_heads % tp_size and tp_size % cfg.num_kv_heads:
        raise ValueError(f"--tp {tp_size} and the model's {cfg.num_kv_heads} KV heads must divide one another "
                         "(KV heads are replicated when --tp exceeds them)")
    for name, size in (("intermediate size", cfg.intermediate_size), ("MoE intermediate size", cfg.moe_intermediate_size)):
        if size % tp_size:
            raise ValueError(f"--tp {tp_size} must divide the model's {name} {size}")
    here = tp_size if local_ranks is None else local_ranks
    if device.type == "cuda" and here > torch.cuda.device_count():
        raise ValueError(f"{here} tensor-parallel ranks on this node need {here} GPUs but "
                         f"{torch.cuda.device_count()} are visible")
