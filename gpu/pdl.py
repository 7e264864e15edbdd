"""Programmatic dependent launch (PDL, sm_90) for CuPy kernels.

A kernel launched with the ``PROGRAMMATIC_STREAM_SERIALIZATION`` attribute may start while
the previous kernel on its stream is still running, once every block of that kernel has
executed ``griddepcontrol.launch_dependents``; it must execute ``griddepcontrol.wait``
before it reads what the previous kernel wrote (``wait`` returns when that kernel has
completed and its memory is visible). Without the attribute both instructions are no-ops,
so a kernel written for PDL is also correct when launched the ordinary way.

CuPy has no launch attributes: :func:`launch` is :func:`mactile.gpu.launch.launch` with
``pdl=True`` (``cuLaunchKernelEx`` through the driver CuPy loaded; works inside CuPy stream
capture, CUDA graphs keep the programmatic edge). :func:`available` says whether the
driver library loads; :func:`launch` raises (never falls back silently) if the driver
refuses the launch.
"""
from __future__ import annotations

from . import launch as _launch

__all__ = ["available", "launch"]


def available() -> bool:
    """Whether the CUDA driver library loads (PDL launches possible)."""
    try:
        _launch._libcuda()
    except OSError:
        return False
    return True


def launch(fn, grid, block, args, *, shared_mem: int = 0, stream=None) -> None:
    """Launch CuPy kernel ``fn`` with programmatic stream serialization on ``stream``
    (default: CuPy's current stream)."""
    _launch.launch(fn, grid, block, args, shared_mem=shared_mem, stream=stream, pdl=True)
