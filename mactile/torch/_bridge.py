"""torch <-> CuPy without copies, on torch's stream, with torch's allocator.

Every CUDA implementation of a :mod:`mactile.torch.ops` op runs inside :func:`on_torch_stream`:

* CuPy's current device and stream are the tensor's device and torch's current stream
  (``cupy.cuda.ExternalStream`` of ``torch.cuda.current_stream().cuda_stream``), so the
  kernels are ordered with torch's work and are recorded by a CUDA-graph capture;
* CuPy allocates through torch's caching allocator (``torch.cuda.caching_allocator_alloc``
  behind a ``cupy.cuda.memory.PythonFunctionAllocator``): the buffers mactile.gpu makes
  internally (workspaces, quantized activations) come from the capture's private pool
  inside ``torch.cuda.graph`` and are counted by ``torch.cuda.memory_allocated``;
* tensors are viewed, not copied (``cupy.asarray`` over ``__cuda_array_interface__``; torch
  exports no stream there, so CuPy does not synchronize).
"""
from __future__ import annotations

import contextlib
import weakref

import torch

__all__ = ["on_torch_stream", "view", "cached"]

_ALLOC: dict = {}
_STREAMS: dict = {}


def _torch_malloc(size: int, device_id: int) -> int:
    if size == 0:
        return 0
    return torch.cuda.caching_allocator_alloc(size, device_id)  # torch's current stream


def _torch_free(ptr: int, device_id: int) -> None:
    if ptr:
        torch.cuda.caching_allocator_delete(ptr)


def _allocator(cp):
    a = _ALLOC.get("a")
    if a is None:
        a = _ALLOC["a"] = cp.cuda.memory.PythonFunctionAllocator(_torch_malloc, _torch_free).malloc
    return a


@contextlib.contextmanager
def on_torch_stream(device: torch.device):
    """CuPy on ``device``, torch's current stream there, and torch's allocator."""
    from mactile.gpu.runtime import require_cupy  # noqa: PLC0415

    cp = require_cupy()
    idx = device.index if device.index is not None else torch.cuda.current_device()
    ptr = torch.cuda.current_stream(idx).cuda_stream
    st = _STREAMS.get((idx, ptr))
    if st is None:
        st = _STREAMS[(idx, ptr)] = cp.cuda.ExternalStream(ptr, idx)
    with cp.cuda.Device(idx), st, cp.cuda.using_allocator(_allocator(cp)):
        yield cp


#: torch dtypes stored for unsigned kernel arrays (torch's unsigned 16/32-bit types have
#: few kernels; the bits are the same).
_UNSIGNED_VIEW = {torch.int32: "uint32", torch.int16: "uint16"}


def view(cp, t: torch.Tensor, dtype: str | None = None):
    """A CuPy array over ``t``'s memory (no copy); ``dtype`` reinterprets the bits."""
    a = cp.asarray(t.detach())  # torch exports no interface for tensors that require grad
    return a.view(dtype) if dtype is not None and a.dtype != dtype else a


_CACHE: dict = {}


def cached(owner: torch.Tensor, tensors, build):
    """``build()``'s result, kept for ``owner`` while the data pointers and shapes of
    ``tensors`` stay the same (a view object made once per layer, not per call). The entry
    is dropped when ``owner`` dies; it is kept beside the tensor, not in its ``__dict__``,
    so that copying a module does not copy CuPy views."""
    key = tuple(t.data_ptr() for t in tensors) + tuple(tuple(t.shape) for t in tensors)
    hit = _CACHE.get(id(owner))
    if hit is not None and hit[0] == key:
        return hit[1]
    obj = build()
    if hit is None:
        weakref.finalize(owner, _CACHE.pop, id(owner), None)
    _CACHE[id(owner)] = (key, obj)
    return obj
