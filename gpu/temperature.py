"""ReSET's step-aware temperature policy on the GPU (one kernel launch per decoding step).

:class:`StepAwareTemperatureGPU` keeps the per-sequence state in device memory and makes
the same decisions, bit for bit, as :class:`mactile.golden.StepAwareTemperature` with the
kernel's :class:`~mactile.golden.reset_temperature.ReductionLayout` (``cluster`` CTAs x 1024
threads per sequence: 8 by default, or 16 with the non-portable cluster size), including
the sampled token (same counter-based generator). Measured on the H100 (docs/gpu.md): 16-CTA
clusters are slower (batch 8: 36.8 vs 19.1 us -- eight 16-SM clusters do not fit the GPCs at
once; batch 1: 18.3 vs 16.9 us), so 8 stays the default.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mactile.golden.reset_temperature import ReductionLayout, StepResult

from .build import kernel
from .runtime import check_launch, require_cupy

__all__ = ["StepAwareTemperatureGPU", "KERNEL_LAYOUT", "R_CHOICES", "CLUSTERS", "layout_for"]

#: Cluster sizes (CTAs per sequence) the kernel is instantiated for, the default first; 16
#: needs the non-portable cluster size (Hopper allows up to 16).
CLUSTERS = (8, 16)
#: Register-array sizes instantiated (elements per thread); vocabularies up to
#: cluster*1024*32.
R_CHOICES = (4, 8, 12, 20, 32)
#: CUfunction attribute that allows clusters of more than 8 CTAs.
_NON_PORTABLE_CLUSTER_SIZE_ALLOWED = 14


def layout_for(cluster: int) -> ReductionLayout:
    """The kernel's summation layout for ``cluster`` CTAs per sequence (pass it to the
    golden model to compare bit for bit)."""
    if cluster not in CLUSTERS:
        raise ValueError(f"cluster must be one of {CLUSTERS}, got {cluster}")
    return ReductionLayout(cluster=cluster, threads=1024)


#: The default kernel's summation layout.
KERNEL_LAYOUT = layout_for(CLUSTERS[0])


@dataclass
class StepAwareTemperatureGPU:
    """GPU ReSET sampler for a fixed batch of ``batch`` sequence slots.

    Parameters are those of the golden model (``tau0``, ``t_low``, ``t_high``,
    ``window``, ``seed``). ``seq_ids`` (default ``0..batch-1``) name the sequences for the
    random generator; slot ``b`` keeps its state across calls until :meth:`reset`.
    """

    batch: int
    tau0: float = 0.6
    t_low: float = 0.1
    t_high: float = 1.0
    window: int = 32
    seed: int = 0
    cluster: int = CLUSTERS[0]

    def __post_init__(self):
        cp = require_cupy()
        self.layout = layout_for(self.cluster)
        if self.batch < 1:
            raise ValueError(f"batch must be >= 1, got {self.batch}")
        if not (self.t_low > 0 and self.t_high > 0):
            raise ValueError("temperatures must be positive")
        if not 1 <= self.window <= 256:
            raise ValueError(f"window must be in 1..256 (the kernel keeps it in shared memory), got {self.window}")
        B = self.batch
        self.count = cp.zeros(B, cp.int64)
        self.sum_all = cp.zeros(B, cp.float64)
        self.t0 = cp.zeros(B, cp.int64)
        self.step_sum = cp.zeros(B, cp.float64)
        self.step_n = cp.zeros(B, cp.int64)
        self.prev_end = cp.zeros(B, cp.int32)
        self.ring = cp.zeros((B, self.window), cp.float64)
        self.seq_ids = cp.arange(B, dtype=cp.int64)
        self.out = {"tokens": cp.zeros(B, cp.int32), "temperature": cp.zeros(B, cp.float32),
                    "entropy": cp.zeros(B, cp.float32), "h_step": cp.zeros(B, cp.float64),
                    "h_bar": cp.zeros(B, cp.float64), "tau": cp.zeros(B, cp.float64)}

    def reset(self, slots=None) -> None:
        """Clear the state of the given slots (all when None)."""
        cp = require_cupy()
        idx = slice(None) if slots is None else cp.asarray(slots, dtype=cp.int64)
        for a in (self.count, self.sum_all, self.t0, self.step_sum, self.step_n, self.prev_end):
            a[idx] = 0
        self.ring[idx] = 0

    def step(self, logits, step_end_mask, *, seq_ids=None, sync: bool = False) -> dict:
        """One decoding step: ``logits`` [batch, V] (CuPy float16/float32),
        ``step_end_mask`` [V] (CuPy bool/uint8). Returns the device output arrays
        (``tokens``, ``temperature``, ``entropy``, ``h_step``, ``h_bar``, ``tau``), reused
        across calls."""
        cp = require_cupy()
        if not isinstance(logits, cp.ndarray) or logits.ndim != 2 or logits.shape[0] != self.batch:
            raise ValueError(f"logits must be a CuPy array [{self.batch}, V]")
        if logits.dtype not in (cp.float16, cp.float32) or not logits.flags.c_contiguous:
            raise ValueError(f"logits must be C-contiguous float16 or float32, got {logits.dtype}")
        V = int(logits.shape[1])
        if not isinstance(step_end_mask, cp.ndarray) or step_end_mask.shape != (V,):
            raise ValueError(f"step_end_mask must be a CuPy array of shape ({V},)")
        mask = step_end_mask.astype(cp.uint8, copy=False) if step_end_mask.dtype != cp.uint8 else step_end_mask
        if seq_ids is not None:
            ids = cp.asarray(seq_ids, dtype=cp.int64)
            if ids.shape != (self.batch,):
                raise ValueError(f"seq_ids must have shape ({self.batch},)")
            self.seq_ids[...] = ids
        R = self.layout.r(V)
        Rmax = next((r for r in R_CHOICES if r >= R), None)
        if Rmax is None:
            raise ValueError(f"vocabulary of {V} exceeds the kernel's "
                             f"{self.cluster * 1024 * R_CHOICES[-1]} entries (cluster {self.cluster})")
        f = np.float32
        inv_lo, inv_hi = f(f(1.0) / f(self.t_low)), f(f(1.0) / f(self.t_high))
        k = _kernel(self.cluster, Rmax)
        o = self.out
        k((self.cluster, self.batch), (1024,),
          (logits, np.int32(logits.dtype == cp.float16), np.int32(V), np.int32(R), mask, self.seq_ids,
           self.count, self.sum_all, self.t0, self.step_sum, self.step_n, self.prev_end, self.ring,
           np.int32(self.window), np.float64(self.tau0), f(self.t_low), f(self.t_high), inv_lo, inv_hi,
           np.uint64(self.seed), o["tokens"], o["temperature"], o["entropy"], o["h_step"], o["h_bar"],
           o["tau"]))
        check_launch("reset_temperature_step", sync=sync)
        return o

    @staticmethod
    def to_result(out: dict) -> StepResult:
        """Host copy of a step's outputs as a golden :class:`StepResult`."""
        g = {k: v.get() for k, v in out.items()}
        return StepResult(g["tokens"], g["temperature"], g["entropy"], g["h_step"], g["h_bar"], g["tau"])


_ATTR_SET: set = set()


def _kernel(cluster: int, rmax: int):
    """The step kernel for (cluster, Rmax); clusters above 8 CTAs get the non-portable
    cluster-size attribute once (outside any graph capture: the first call of a shape)."""
    k = kernel("reset_temperature_step", CL=cluster, R=rmax)
    if cluster > 8 and id(k) not in _ATTR_SET:
        cp = require_cupy()
        fn = getattr(k, "kernel", k)  # cupy.RawKernel wraps a cupy.cuda.Function
        cp.cuda.driver.funcSetAttribute(fn.ptr, _NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1)
        _ATTR_SET.add(id(k))
    return k
