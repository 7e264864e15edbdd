"""Thin CuPy access for this package's kernels: availability, compilation, launches.

Imports without CuPy. :func:`require` raises :class:`GpuUnavailable` with the reason when
CuPy or a CUDA device is missing (tests turn that into a skip).
"""
from __future__ import annotations

import functools
import hashlib

__all__ = ["GpuUnavailable", "require", "available", "compile_module", "NVRTC_OPTIONS"]

#: NVRTC options that compile wgmma/cp.async/ldmatrix/b1 mma on the lent H100.
NVRTC_OPTIONS = ("-arch=sm_90a", "-std=c++17")


class GpuUnavailable(RuntimeError):
    """No CuPy or no CUDA device (the message says which)."""


@functools.lru_cache(maxsize=1)
def _probe():
    try:
        import cupy
    except Exception as e:  # ImportError, or a broken CUDA install
        return None, f"CuPy is not importable ({type(e).__name__}: {e})"
    try:
        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:
        return None, f"no CUDA device ({type(e).__name__}: {e})"
    if n == 0:
        return None, "no CUDA device"
    major = cupy.cuda.Device().compute_capability
    if int(major) < 90:
        return None, f"these kernels need a Hopper GPU (sm_90a); device is sm_{major}"
    return cupy, ""


def available() -> tuple[bool, str]:
    """``(True, '')`` when kernels can run, else ``(False, reason)``."""
    cp, why = _probe()
    return cp is not None, why


def require():
    """The ``cupy`` module, or :class:`GpuUnavailable` naming what is missing."""
    cp, why = _probe()
    if cp is None:
        raise GpuUnavailable(why)
    return cp


@functools.lru_cache(maxsize=None)
def _compile(source: str, names: tuple[str, ...]):
    cp = require()
    return cp.RawModule(code=source, options=NVRTC_OPTIONS, name_expressions=names)


def compile_module(source: str, names) -> "object":
    """A ``cupy.RawModule`` for ``source`` with the templates ``names`` instantiated (cached)."""
    return _compile(source, tuple(names))


def source_digest(source: str) -> str:
    return hashlib.sha1(source.encode()).hexdigest()[:12]
