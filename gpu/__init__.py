"""CuPy CUDA kernels for Hopper GPUs (H100/H200). Imports without CuPy; kernels need it."""
