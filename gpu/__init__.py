"""CuPy CUDA kernels for Hopper GPUs (H100/H200). Imports without CuPy; kernels need it.

Layers:

* :mod:`.runtime`   -- NVRTC compile/cache, launch checks, device/version info (shared);
* :mod:`.bench.harness` -- generic timing harness (graph replay, L2 rotation, read peak,
  library baselines, JSON records), shared with every kernel family.
* :mod:`.flexq` -- FlexQ W6A6/W6A8 bit-plane GEMM on binary tensor cores.
* :mod:`.nestedfp` -- NestedFP dual-precision (FP16 / FP8) GEMM from two byte planes.
"""
