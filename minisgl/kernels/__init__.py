"""The GPU kernels, at the bottom of the import graph: they import nothing of minisgl but
`minisgl.utils` (tests/test_import_graph.py checks), and the layers, quantization, attention and
engine call them.

- `dispatch`: which kernels run on a tensor (FlashInfer's norm, activation and rotary kernels,
  minisgl's Triton ones, the GEMV), imported on first use, so the package runs where triton or
  FlashInfer is missing;
- `device`, `launch`: the GPU's SM count and programmatic dependent launch; launching a compiled
  kernel with little host time;
- `rmsnorm`, `qk_norm_rope`, `decode_inputs`, `sampling`: the layers' and the decode step's own;
- `gemv` (with `gemv_tiles`), `qkv_rope`, `quantize`: the weight-streaming GEMV (FP8 weights, the
  bf16 lm_head), the q/k/v one that rotates and stores into the KV cache, and FP8 activations;
- `decode_attention`: decode attention in the CUDA graphs, over chunks of even size;
- `fused_moe`: mixture-of-experts routing, alignment and expert GEMMs; `moe_decode`: the same
  feed-forward for decode's few tokens as weight-streaming GEMVs;
- `jit_builds`: FlashInfer's compiles at run time (a module not prebuilt), logged with a heartbeat.
"""
