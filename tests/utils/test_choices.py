"""Each set of allowed values is declared once, in minisgl/utils/choices.py (standard library only,
as the flags are read without torch): the flags offer exactly those names, and the implementations
behind them serve exactly those names, no more and no fewer."""

from __future__ import annotations

import pytest
import torch

from minisgl.attention import ATTN_BACKENDS
from minisgl.engine.config import resolve_device, resolve_dtype
from minisgl.kvcache import KV_CACHE_DTYPES, PREFIX_CACHES
from minisgl.layers.moe import BACKENDS as MOE_BACKENDS
from minisgl.quantization.config import ONLINE_QUANTIZATION
from minisgl.server.args import ServerArgs, build_parser
from minisgl.server.parsers import REASONING_PARSERS, TOOL_PARSERS
from minisgl.utils import choices


def flag_choices(dest: str) -> list[str] | None:
    return next(a.choices for a in build_parser()._actions if a.dest == dest)


@pytest.mark.parametrize(("flag", "names", "implemented"), [
    ("cache", choices.PREFIX_CACHES, PREFIX_CACHES),
    ("tool_call_parser", choices.TOOL_PARSERS, TOOL_PARSERS),
    ("reasoning_parser", choices.REASONING_PARSERS, REASONING_PARSERS),
    ("kv_cache_dtype", tuple(choices.KV_CACHE_DTYPES), KV_CACHE_DTYPES),
    ("quantization", choices.ONLINE_QUANTIZATION, ONLINE_QUANTIZATION),
    ("moe_backend", choices.MOE_BACKENDS, MOE_BACKENDS),
])
def test_a_flag_offers_exactly_the_names_its_implementation_serves(flag, names, implemented):
    assert flag in {f.name for f in ServerArgs.__dataclass_fields__.values()}
    assert flag_choices(flag) == list(names)
    assert tuple(implemented) == tuple(names)


def test_the_attention_backends_are_the_names_attn_accepts():
    """--attn takes a name or two (prefill,decode), so the flag checks them itself, against this list."""
    assert sorted(ATTN_BACKENDS) == sorted(choices.ATTN_BACKEND_NAMES)


def test_every_dtype_and_device_name_resolves_and_others_are_refused_naming_them_all():
    for name in choices.DTYPES:
        assert resolve_dtype(name) == (None if name == "auto" else getattr(torch, name))
    assert resolve_device("cpu") == torch.device("cpu") and resolve_device("auto").type in ("cpu", "cuda")
    with pytest.raises(ValueError, match="use auto, bfloat16, float16 or float32"):
        resolve_dtype("int8")
    with pytest.raises(ValueError, match="use auto, cuda or cpu"):
        resolve_device("tpu")
