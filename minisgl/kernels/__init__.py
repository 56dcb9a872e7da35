"""The GPU kernels: minisgl's Triton kernels and the door to FlashInfer's compiled ones, at the
bottom of the import graph (they import nothing of minisgl but `minisgl.utils`; layers,
quantization, attention and the engine call them). `dispatch` says which kernels run on a tensor
and imports them on first use, so the package runs where triton or FlashInfer is missing."""
