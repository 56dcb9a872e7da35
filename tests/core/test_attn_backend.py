"""The attention backend's interface (minisgl.core.attn_backend): a backend must prepare each
batch's metadata and attend; it is named by its class; one without CUDA graphs says so when asked
to capture; and what it reads from a layer is what AttnLayer declares and the model's
AttentionLayer carries."""

from __future__ import annotations

import ast
import typing
from pathlib import Path

import pytest

import minisgl.attention
from minisgl.core.attn_backend import AttnLayer, BaseAttnBackend
from minisgl.layers import AttentionLayer


class ExampleBackend(BaseAttnBackend):
    def prepare_metadata(self, batch):
        pass

    def forward(self, q, k, v, layer, batch):
        return q


def test_a_backend_must_prepare_metadata_and_attend():
    class NoForward(BaseAttnBackend):
        def prepare_metadata(self, batch):
            pass

    with pytest.raises(TypeError, match="forward"):
        NoForward()


def test_a_backend_is_named_by_its_class_without_the_backend_suffix():
    assert ExampleBackend().label == "Example"


def test_a_backend_without_cuda_graphs_refuses_to_capture_naming_itself():
    backend = ExampleBackend()
    assert not backend.supports_cuda_graph and not backend.accepts_stored_kv
    with pytest.raises(NotImplementedError, match="ExampleBackend does not support CUDA graphs"):
        backend.init_capture_graph(8, [1, 2, 4, 8])
    assert backend.graph_rows_lens(4) is None


def test_the_attention_layer_carries_what_attn_layer_declares():
    layer = AttentionLayer(layer_id=3, num_heads=8, num_kv_heads=2, head_dim=64)
    for name, kind in typing.get_type_hints(AttnLayer).items():
        assert isinstance(getattr(layer, name), kind), name
    assert (layer.layer_id, layer.num_heads, layer.num_kv_heads, layer.scale) == (3, 8, 2, 64**-0.5)


def test_the_backends_read_from_a_layer_only_what_attn_layer_declares():
    read = set()
    for path in Path(minisgl.attention.__file__).parent.glob("*.py"):
        read |= {node.attr for node in ast.walk(ast.parse(path.read_text()))
                 if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "layer"}
    assert read and read <= set(typing.get_type_hints(AttnLayer)), read
