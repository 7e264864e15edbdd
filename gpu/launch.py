"""Kernel launches that CuPy cannot express: tensor maps passed by value, and programmatic
dependent launch (PDL), through the CUDA driver API.

* :class:`TensorMap` -- a TMA descriptor made by ``cuTensorMapEncodeTiled`` (128 opaque
  bytes) for a 2-D row-major array on the GPU: the box the kernel copies per
  ``cp.async.bulk.tensor``, the shared-memory swizzle, zero fill outside the array.
* :func:`launch` -- ``cuLaunchKernelEx`` on CuPy's current stream with kernel arguments of
  any of these kinds: CuPy arrays (their device pointer), ``None`` (a null pointer), NumPy
  ``int32``/``uint32``/``int64``/``float32`` scalars, :class:`TensorMap` (by value); and,
  with ``pdl=True``, the programmatic-stream-serialization attribute, and with ``cluster=n``
  the cluster-dimension attribute (thread-block clusters chosen at launch). Works inside CUDA
  graph capture.
* :func:`max_active_clusters` -- how many clusters of a kernel the GPU holds at once.

Both go through ``libcuda`` with :mod:`ctypes` (the driver CuPy already loaded), so nothing
beyond CuPy is needed. Nothing here runs at import.
"""
from __future__ import annotations

import ctypes
import functools

import numpy as np

__all__ = ["TensorMap", "launch", "max_active_clusters", "DTYPES", "SWIZZLE"]

#: CUtensorMapDataType of the element types the kernels copy.
DTYPES = {np.dtype(np.uint8): 0, np.dtype(np.uint16): 1, np.dtype(np.float16): 6,
          np.dtype(np.float32): 7}
#: CUtensorMapSwizzle by the row width in bytes it serves.
SWIZZLE = {0: 0, 32: 1, 64: 2, 128: 3}
_L2_PROMOTION_256B = 3
_CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6
_CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION = 4


@functools.lru_cache(maxsize=1)
def _libcuda():
    lib = ctypes.CDLL("libcuda.so.1")
    enc = lib.cuTensorMapEncodeTiled
    enc.restype = ctypes.c_int
    enc.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p,
                    ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_uint64),
                    ctypes.POINTER(ctypes.c_uint32), ctypes.POINTER(ctypes.c_uint32),
                    ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int]
    ex = lib.cuLaunchKernelEx
    ex.restype = ctypes.c_int
    ex.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    return lib


class _LaunchConfig(ctypes.Structure):
    _fields_ = [("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint), ("gridDimZ", ctypes.c_uint),
                ("blockDimX", ctypes.c_uint), ("blockDimY", ctypes.c_uint), ("blockDimZ", ctypes.c_uint),
                ("sharedMemBytes", ctypes.c_uint), ("hStream", ctypes.c_void_p),
                ("attrs", ctypes.c_void_p), ("numAttrs", ctypes.c_uint)]


class _LaunchAttribute(ctypes.Structure):  # CUlaunchAttribute: id, pad to 8, 64-byte value union
    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", ctypes.c_char * 64)]


class TensorMap:
    """TMA descriptor of a 2-D row-major GPU array ``a[rows, cols]``.

    Parameters
    ----------
    a : cupy.ndarray
        2-D, C-contiguous, 16-byte aligned, row pitch a multiple of 16 bytes.
    box : (int, int)
        ``(box_cols, box_rows)``: elements per copy along the row and rows per copy
        (each <= 256; ``box_cols * itemsize`` <= the swizzle width).
    swizzle : {0, 32, 64, 128}
        Shared-memory swizzle (row width in bytes; 0 = none).
    """

    __slots__ = ("_buf", "_addr", "shape", "box", "swizzle", "ptr")

    def __init__(self, a, box, swizzle: int):
        dt = np.dtype(a.dtype)
        if dt not in DTYPES:
            raise ValueError(f"TensorMap: unsupported dtype {dt}")
        if a.ndim != 2 or not a.flags.c_contiguous:
            raise ValueError("TensorMap: need a 2-D C-contiguous array")
        rows, cols = (int(d) for d in a.shape)
        pitch = cols * dt.itemsize
        if pitch % 16 or int(a.data.ptr) % 16:
            raise ValueError(f"TensorMap: row pitch ({pitch} B) and address must be multiples of 16")
        bc, br = (int(b) for b in box)
        if not (1 <= bc <= 256 and 1 <= br <= 256) or (swizzle and bc * dt.itemsize > swizzle):
            raise ValueError(f"TensorMap: box {box} does not fit (swizzle {swizzle})")
        if swizzle not in SWIZZLE:
            raise ValueError(f"TensorMap: swizzle must be one of {sorted(SWIZZLE)}")
        self._buf = (ctypes.c_uint64 * 24)()  # 128 bytes, 64-byte aligned inside
        base = ctypes.addressof(self._buf)
        self._addr = base + ((64 - base % 64) % 64)
        dims = (ctypes.c_uint64 * 2)(cols, rows)
        strides = (ctypes.c_uint64 * 1)(pitch)
        boxd = (ctypes.c_uint32 * 2)(bc, br)
        estr = (ctypes.c_uint32 * 2)(1, 1)
        err = _libcuda().cuTensorMapEncodeTiled(
            ctypes.c_void_p(self._addr), DTYPES[dt], 2, ctypes.c_void_p(int(a.data.ptr)), dims, strides,
            boxd, estr, 0, SWIZZLE[swizzle], _L2_PROMOTION_256B, 0)
        if err != 0:
            raise RuntimeError(f"cuTensorMapEncodeTiled failed (CUresult {err}) for shape {a.shape}, "
                               f"dtype {dt}, box {box}, swizzle {swizzle}")
        self.shape, self.box, self.swizzle, self.ptr = (rows, cols), (bc, br), swizzle, int(a.data.ptr)

    def as_arg(self):
        """A ctypes object holding the 128 descriptor bytes (a by-value kernel argument)."""
        return (ctypes.c_uint64 * 16).from_address(self._addr)


def _set_attribute(attr: "_LaunchAttribute", attr_id: int, value) -> None:
    """Fill one CUlaunchAttribute: its id and the bytes of its value (a ctypes object)."""
    attr.id = attr_id
    ctypes.memmove(ctypes.addressof(attr) + _LaunchAttribute.value.offset, ctypes.byref(value),
                   ctypes.sizeof(value))


def _cluster_dim(cluster: int):
    """CUlaunchAttributeValue.clusterDim: {x, y, z} clusters along x."""
    return (ctypes.c_uint * 3)(int(cluster), 1, 1)


def max_active_clusters(fn, threads: int, shared_mem: int, cluster: int) -> int:
    """How many clusters of ``cluster`` CTAs (``threads`` threads, ``shared_mem`` bytes of
    dynamic shared memory each) of kernel ``fn`` the GPU holds at once
    (``cuOccupancyMaxActiveClusters``).

    Raises
    ------
    RuntimeError
        When the driver refuses the query (the CUresult is named).
    """
    lib = _libcuda()
    cfg = _LaunchConfig(cluster, 1, 1, int(threads), 1, 1, int(shared_mem), None, None, 0)
    attr = _LaunchAttribute()
    _set_attribute(attr, _CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, _cluster_dim(cluster))
    cfg.attrs = ctypes.addressof(attr)
    cfg.numAttrs = 1
    n = ctypes.c_int(0)
    q = lib.cuOccupancyMaxActiveClusters
    q.restype = ctypes.c_int
    q.argtypes = [ctypes.POINTER(ctypes.c_int), ctypes.c_void_p, ctypes.c_void_p]
    err = q(ctypes.byref(n), ctypes.c_void_p(_handle(fn)), ctypes.byref(cfg))
    if err != 0:
        raise RuntimeError(f"cuOccupancyMaxActiveClusters failed (CUresult {err}) for clusters of {cluster}, "
                           f"{threads} threads, {shared_mem} bytes of shared memory")
    return int(n.value)


def _handle(fn) -> int:
    for path in (("kernel", "ptr"), ("ptr",), ("_kernel", "ptr")):
        obj = fn
        try:
            for a in path:
                obj = getattr(obj, a)
            return int(obj)
        except AttributeError:
            continue
    raise TypeError(f"launch: cannot find the CUfunction handle of {type(fn).__name__}")


def _arg(a):
    if a is None:
        return ctypes.c_void_p(0)
    if isinstance(a, TensorMap):
        return a.as_arg()
    if hasattr(a, "data") and hasattr(a.data, "ptr"):  # cupy.ndarray
        return ctypes.c_void_p(int(a.data.ptr))
    if isinstance(a, np.int32):
        return ctypes.c_int32(int(a))
    if isinstance(a, np.uint32):
        return ctypes.c_uint32(int(a))
    if isinstance(a, np.int64):
        return ctypes.c_int64(int(a))
    if isinstance(a, np.float32):
        return ctypes.c_float(float(a))
    raise TypeError(f"launch: unsupported kernel argument type {type(a).__name__} (use cupy arrays, "
                    "None, TensorMap and numpy int32/uint32/int64/float32 scalars)")


def launch(fn, grid, block, args, *, shared_mem: int = 0, stream=None, pdl: bool = False,
           cluster: int = 1) -> None:
    """Launch CuPy kernel ``fn`` on ``stream`` (default: CuPy's current stream); with
    ``cluster`` > 1, as thread-block clusters of that many consecutive CTAs along x (the grid's
    x a multiple of it; for a kernel compiled without ``__cluster_dims__``).

    Raises
    ------
    ValueError
        When the grid's x is not a multiple of ``cluster`` (or ``cluster`` < 1).
    RuntimeError
        When the driver refuses the launch (the CUresult is named).
    """
    grid = tuple(int(g) for g in grid) + (1,) * (3 - len(grid))
    block = tuple(int(b) for b in block) + (1,) * (3 - len(block))
    if cluster < 1 or grid[0] % cluster:
        raise ValueError(f"launch: grid x {grid[0]} is not a multiple of the cluster size {cluster}")
    import cupy as cp  # noqa: PLC0415

    st = cp.cuda.get_current_stream() if stream is None else stream
    cfg = _LaunchConfig(grid[0], grid[1], grid[2], block[0], block[1], block[2], int(shared_mem),
                        ctypes.c_void_p(int(st.ptr)), None, 0)
    attrs = (_LaunchAttribute * 2)()
    n = 0
    if pdl:
        _set_attribute(attrs[n], _CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION, ctypes.c_int(1))
        n += 1
    if cluster > 1:
        _set_attribute(attrs[n], _CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, _cluster_dim(cluster))
        n += 1
    if n:
        cfg.attrs = ctypes.addressof(attrs)
        cfg.numAttrs = n
    vals = [_arg(a) for a in args]
    ptrs = (ctypes.c_void_p * max(1, len(vals)))(*[ctypes.addressof(v) for v in vals])
    err = _libcuda().cuLaunchKernelEx(ctypes.byref(cfg), ctypes.c_void_p(_handle(fn)), ptrs, None)
    if err != 0:
        raise RuntimeError(f"cuLaunchKernelEx failed (CUresult {err}) for grid {grid}, block {block}, "
                           f"{shared_mem} bytes of shared memory")
