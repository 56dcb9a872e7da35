"""Dummy weights with a clear greedy winner, for benchmarks that replay a greedy continuation.

Dummy weights (`init_dummy_weights`) give near-flat logits: the top two tokens are often closer
than bf16's rounding, so two kernels that sum in another order (a verify step's prefill kernel, a
decode step's decode kernel) pick different tokens within a few dozen steps, and a drafter
replaying one path's continuation is wrong on the other from there (benchmark/NOTES.md, the first
GPU run of speculative decoding). Here every layer's output projections are zero, so the residual
stream stays the current token's embedding, and the LM head is the embedding matrix: each token's
logit is its embedding's dot product with the current one, the current token's own the largest by
far (the norm of a random vector of `hidden` entries against a dot product of order its root). The
greedy continuation repeats the prompt's last token under any summation order. Every GEMM and
attention still runs at its shapes, so a step costs what it costs with real weights.
"""

from __future__ import annotations

import torch

from minisgl.models.decoder import MLP, DecoderForCausalLM, DecoderLayer


def make_greedy_peaked(model: DecoderForCausalLM) -> None:
    """Rewrite a dense decoder's dummy weights in place (addresses kept: captured CUDA graphs read
    them as they are); a mixture-of-experts model is refused."""
    inner = model.model
    with torch.no_grad():
        for layer in inner.layers:
            assert isinstance(layer, DecoderLayer)
            if not isinstance(layer.mlp, MLP):
                raise ValueError("make_greedy_peaked takes a dense decoder (no mixture of experts)")
            for proj in (layer.self_attn.o_proj, layer.mlp.down_proj):
                proj.weight.zero_()
                if proj.bias is not None:
                    proj.bias.zero_()
        inner.norm.weight.fill_(1.0)
        if model.lm_head.weight is not inner.embed_tokens.weight:
            model.lm_head.weight.copy_(inner.embed_tokens.weight)
