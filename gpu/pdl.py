"""Programmatic dependent launch (PDL, sm_90) for CuPy kernels, through ``cuda.bindings``.

A kernel launched with the ``PROGRAMMATIC_STREAM_SERIALIZATION`` attribute may start while
the previous kernel on its stream is still running, once every block of that kernel has
executed ``griddepcontrol.launch_dependents``; it must execute ``griddepcontrol.wait``
before it reads what the previous kernel wrote (``wait`` returns when that kernel has
completed and its memory is visible). Without the attribute both instructions are no-ops,
so a kernel written for PDL is also correct when launched the ordinary way.

CuPy has no launch attributes, so :func:`launch` calls ``cuLaunchKernelEx`` of the
``cuda-bindings`` package (part of the GPU machines' image) on CuPy's current stream; it
works inside CuPy stream capture (CUDA graphs keep the programmatic edge).
:func:`available` says whether the package imports; :func:`launch` raises (never falls
back silently) if the driver refuses the launch.
"""
from __future__ import annotations

import ctypes

import numpy as np

__all__ = ["available", "launch"]

_DRV = None


def _driver():
    global _DRV
    if _DRV is None:
        try:
            import cuda.bindings.driver as drv  # noqa: PLC0415
        except Exception:  # noqa: BLE001 - any import failure means "not available"
            drv = False
        _DRV = drv
    return _DRV


def available() -> bool:
    """Whether ``cuda.bindings`` imports (PDL launches possible)."""
    return bool(_driver())


def _handle(fn) -> int:
    for path in (("kernel", "ptr"), ("ptr",), ("_kernel", "ptr")):
        obj = fn
        try:
            for a in path:
                obj = getattr(obj, a)
            return int(obj)
        except AttributeError:
            continue
    raise TypeError(f"pdl: cannot find the CUfunction handle of {type(fn).__name__}")


def _arg(a):
    if hasattr(a, "data") and hasattr(a.data, "ptr"):  # cupy.ndarray
        return ctypes.c_void_p(int(a.data.ptr))
    if isinstance(a, (np.int32,)):
        return ctypes.c_int32(int(a))
    if isinstance(a, (np.uint32,)):
        return ctypes.c_uint32(int(a))
    if isinstance(a, (np.int64,)):
        return ctypes.c_int64(int(a))
    if isinstance(a, (np.float32,)):
        return ctypes.c_float(float(a))
    raise TypeError(f"pdl: unsupported kernel argument type {type(a).__name__} (use cupy "
                    "arrays and numpy int32/uint32/int64/float32 scalars)")


def launch(fn, grid, block, args, *, shared_mem: int = 0, stream=None) -> None:
    """Launch CuPy kernel ``fn`` with programmatic stream serialization on ``stream``
    (default: CuPy's current stream)."""
    drv = _driver()
    if not drv:
        raise RuntimeError("pdl: cuda.bindings is not importable")
    import cupy as cp  # noqa: PLC0415
    grid = tuple(grid) + (1,) * (3 - len(grid))
    block = tuple(block) + (1,) * (3 - len(block))
    st = cp.cuda.get_current_stream() if stream is None else stream
    attr = drv.CUlaunchAttribute()
    attr.id = drv.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
    attr.value.programmaticStreamSerializationAllowed = 1
    cfg = drv.CUlaunchConfig()
    cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = (int(g) for g in grid)
    cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = (int(b) for b in block)
    cfg.sharedMemBytes = int(shared_mem)
    cfg.hStream = drv.CUstream(int(st.ptr))
    cfg.attrs = [attr]
    cfg.numAttrs = 1
    vals = [_arg(a) for a in args]
    ptrs = (ctypes.c_void_p * len(vals))(*[ctypes.addressof(v) for v in vals])
    res = drv.cuLaunchKernelEx(cfg, drv.CUfunction(_handle(fn)), ctypes.addressof(ptrs), 0)
    err = res[0] if isinstance(res, tuple) else res
    if err != drv.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"pdl: cuLaunchKernelEx failed: {err}")
