"""CuPy CUDA kernels for Hopper GPUs (H100/H200). Imports without CuPy; kernels need it.

Layers:

* :mod:`.runtime` -- NVRTC compile/cache, launch checks, device/version info (shared);
* :mod:`.bench.harness` -- generic timing harness (graph replay, L2 rotation, read peak,
  library baselines, JSON records), shared with every kernel family;
* :mod:`.formats` / :mod:`.packing` -- FP4 kernel constants derived from the golden specs,
  packers from golden ``Quantized`` weights to the kernels' layouts and back;
* :mod:`.engine` -- the GEMM engine (TMA + mbarrier pipeline, warp-specialized wgmma) for
  every weight format (nvfp4, mxfp4, razer, razer-g128, NestedFP FP16/FP8);
* :mod:`.w4a16` -- tensor-core GEMM (the engine) and CUDA-core GEMV (nvfp4, razer, razer-g128);
* :mod:`.w4a4` -- ReSET's W4A4 NVFP4 path: on-the-fly activation quantization, the GEMV or the engine;
* :mod:`.linear` -- ``linear(x, packed)``: one call for every packed weight (tuning table);
* :mod:`.temperature` -- ReSET's step-aware temperature sampler;
* :mod:`.flexq` -- FlexQ W6A6/W6A8 bit-plane GEMM on binary tensor cores;
* :mod:`.nestedfp` -- NestedFP dual-precision (FP16 / FP8) GEMM from two byte planes.
"""
from .engine import EngineConfig
from .linear import dispatch, linear
from .packing import PackedW4A16, pack_activation, pack_w4a16
from .runtime import GpuUnavailable, gpu_available, gpu_skip_reason
from .temperature import StepAwareTemperatureGPU
from .w4a4 import gemv_w4a4, linear_w4a4, quantize_activation
from .w4a16 import gemm_tc, gemv_cc

__all__ = ["linear", "dispatch", "EngineConfig", "pack_w4a16", "pack_activation", "PackedW4A16", "gemm_tc",
           "gemv_cc", "quantize_activation", "gemv_w4a4", "linear_w4a4",
           "StepAwareTemperatureGPU", "GpuUnavailable", "gpu_available", "gpu_skip_reason"]
