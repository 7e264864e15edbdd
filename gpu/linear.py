"""``mactile.gpu.linear(x, packed_weight)``: the W4A16 linear layer, kernel chosen by M.

The choice comes from a *measured* crossover table (written by ``mactile bench gpu``,
shipped in ``gpu/tuning/``): for each format and weight shape the benchmark records the
largest M at which the CUDA-core kernel beat the tensor-core kernel. A request uses the
entry of the nearest measured shape (log distance in N and K) for its format; M at or
below the crossover runs the CUDA-core kernel (M <= 8 only), above it the tensor-core
kernel. Without a table for the device, or without the layout a kernel needs, the
kernel whose layout exists is used (tensor cores first: they handle every M).
"""
from __future__ import annotations

import json
import math
from functools import lru_cache
from pathlib import Path

import numpy as np

from .packing import PackedW4A16
from .runtime import device_info
from .w4a16 import CC_MAX_M, gemm_tc, gemv_cc

__all__ = ["linear", "dispatch", "load_table", "TUNING_DIR", "Choice"]

TUNING_DIR = Path(__file__).resolve().parent / "tuning"


class Choice(tuple):
    """(kernel, reason): kernel is "cc" or "tc"."""

    @property
    def kernel(self) -> str:
        return self[0]

    @property
    def reason(self) -> str:
        return self[1]


def _slug(name: str) -> str:
    n = name.lower()
    for key in ("h200", "h100", "gh200", "b200"):
        if key in n:
            return key
    return "".join(ch if ch.isalnum() else "_" for ch in n)


@lru_cache(maxsize=8)
def load_table(path: str | None = None) -> dict | None:
    """The crossover table for ``path`` or for the current device (None if absent)."""
    if path is None:
        try:
            path = str(TUNING_DIR / f"{_slug(device_info()['name'])}.json")
        except Exception:
            return None
    p = Path(path)
    if not p.exists():
        return None
    return json.loads(p.read_text())


def dispatch(pw: PackedW4A16, M: int, *, table: dict | None = None) -> Choice:
    """Which kernel ``linear`` runs for ``M`` tokens, and why."""
    has_cc = "rowmajor" in pw.layouts
    has_tc = "frag" in pw.layouts
    if not (has_cc or has_tc):
        raise ValueError("the packed weight has no kernel layout")
    if not has_tc:
        if M > CC_MAX_M:
            raise ValueError(f"M = {M} needs the tensor-core kernel, but the weight was packed "
                             f"without the 'frag' layout")
        return Choice(("cc", "only the rowmajor layout is packed"))
    if not has_cc or M > CC_MAX_M:
        return Choice(("tc", "M above the CUDA-core range" if has_cc else "only the frag layout is packed"))
    entries = [e for e in (table or {}).get("entries", []) if e["format"] == pw.fmt.name]
    if not entries:
        return Choice(("tc", "no measured crossover for this format/device"))
    e = min(entries, key=lambda e: abs(math.log(e["N"] / pw.N)) + abs(math.log(e["K"] / pw.K)))
    m_x = int(e["crossover_m"])
    k = "cc" if M <= m_x else "tc"
    return Choice((k, f"crossover M = {m_x} measured at N={e['N']} K={e['K']}"))


def linear(x, pw: PackedW4A16, *, out=None, out_dtype=np.float16, table: dict | None = None):
    """``y = x @ W.T`` for FP16 ``x[M, K]`` (CuPy) and a packed FP4 weight; FP32
    accumulation, FP16 (default) or FP32 output. The kernel is chosen by :func:`dispatch`."""
    if table is None:
        table = load_table()
    M = int(x.shape[0]) if hasattr(x, "shape") and len(x.shape) == 2 else 0
    if M < 1:
        raise ValueError("x must be a 2-D [M, K] array with M >= 1")
    ch = dispatch(pw, M, table=table)
    if ch.kernel == "cc":
        return gemv_cc(x, pw, out=out, out_dtype=out_dtype)
    return gemm_tc(x, pw, out=out, out_dtype=out_dtype)
