"""CuPy CUDA kernels for Hopper GPUs (H100/H200). Imports without CuPy; kernels need it.

Layers:

* :mod:`.runtime`   -- NVRTC compile/cache, launch checks, device/version info (shared);
* :mod:`.bench.harness` -- generic timing harness (graph replay, L2 rotation, read peak,
  library baselines, JSON records), shared with every kernel family.
"""
