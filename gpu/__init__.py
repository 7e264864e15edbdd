"""CuPy CUDA kernels for Hopper GPUs (H100/H200). Imports without CuPy; kernels need it.

- :mod:`.flexq`: FlexQ W6A6/W6A8 bit-plane GEMM on binary tensor cores.
- :mod:`.nestedfp`: NestedFP dual-precision (FP16 / FP8) GEMM from two byte planes.
"""
