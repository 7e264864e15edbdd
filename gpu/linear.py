"""``mactile.gpu.linear(x, packed)``: one call for every packed weight on the GPU.

* FP4 weights (:class:`~mactile.gpu.packing.PackedW4A16`: nvfp4, mxfp4, razer, razer-g128)
  run on the GEMM engine (:mod:`mactile.gpu.engine`) with the configuration of the device's
  tuning table's ``engine`` entries (``gpu/tuning/<device>.json``; the entry of the nearest
  measured shape and the smallest measured M >= the request within its token tile) or the
  engine's default; for
  M <= 8 the CUDA-core GEMV (``rowmajor`` layout) when the table measured it faster on the
  nearest shape.
* NestedFP layers (:class:`~mactile.gpu.nestedfp.NestedFPLinear`) in ``mode='fp16'`` or
  ``'fp8'``: the engine at every M (configurations from the same table; FP8 mode quantizes
  the activations per token first).
* FlexQ layers (:class:`~mactile.gpu.flexq.FlexQLinear`): W6A6/W6A8 on binary tensor cores.

:func:`dispatch` says which kernel runs and why.
"""
from __future__ import annotations

import math

import numpy as np

from .packing import PackedW4A16
from .tuning import engine_choice, load_table
from .w4a16 import CC_MAX_M, gemm_tc, gemv_cc

__all__ = ["linear", "dispatch", "Choice"]


class Choice(tuple):
    """``(kernel, config, reason)``: kernel "engine" or "cc" (FP4), "nestedfp", "flexq"."""

    @property
    def kernel(self) -> str:
        return self[0]

    @property
    def config(self):
        return self[1]

    @property
    def reason(self) -> str:
        return self[2]


def _cc_faster(table: dict | None, pw: PackedW4A16, M: int) -> tuple[bool, str]:
    entries = [e for e in (table or {}).get("crossover", []) if e["format"] == pw.fmt.name]
    if not entries:
        return False, "no measured CUDA-core crossover"
    e = min(entries, key=lambda e: abs(math.log(e["N"] / pw.N)) + abs(math.log(e["K"] / pw.K)))
    return M <= int(e["crossover_m"]), f"CUDA-core crossover M = {e['crossover_m']} measured at N={e['N']} K={e['K']}"


def dispatch(packed, M: int, *, mode: str | None = None, table: dict | None = None) -> Choice:
    """Which kernel :func:`linear` runs for ``M`` tokens, with what configuration, and why."""
    if isinstance(packed, PackedW4A16):
        has_cc, has_tc = "rowmajor" in packed.layouts, "frag" in packed.layouts
        if not (has_cc or has_tc):
            raise ValueError("the packed weight has no kernel layout")
        if not has_tc:
            if M > CC_MAX_M:
                raise ValueError(f"M = {M} needs the engine, but the weight was packed without the "
                                 "'frag' layout")
            return Choice(("cc", None, "only the rowmajor layout is packed"))
        if has_cc and M <= CC_MAX_M:
            faster, why = _cc_faster(table, packed, M)
            if faster:
                return Choice(("cc", None, why))
        cfg, why = engine_choice(table, packed.fmt.name, packed.K, packed.N, M)
        return Choice(("engine", cfg, why if cfg else f"engine default ({why})"))
    from .flexq.kernels import FlexQLinear  # noqa: PLC0415
    from .nestedfp.kernels import NestedFPLinear  # noqa: PLC0415

    if isinstance(packed, NestedFPLinear):
        return Choice(("nestedfp", None, f"NestedFP {mode or 'fp16'} mode (its own M dispatch)"))
    if isinstance(packed, FlexQLinear):
        return Choice(("flexq", None, "FlexQ bit-plane GEMM"))
    raise TypeError(f"linear: no GPU kernel for {type(packed).__name__} (pack FP4 weights with "
                    "mactile.gpu.pack_w4a16, or build a NestedFPLinear / FlexQLinear)")


def linear(x, packed, *, mode: str | None = None, out=None, out_dtype=np.float16, table: dict | None = None):
    """``y = x @ W.T`` for FP16 ``x[M, K]`` (CuPy) and a packed weight ``W[N, K]``.

    Parameters
    ----------
    packed : PackedW4A16 | NestedFPLinear | FlexQLinear
    mode : {"fp16", "fp8"}, optional
        NestedFP's precision mode (default "fp16"); refused for the other kinds.
    out, out_dtype
        Output buffer / dtype (FP16 default; FP32 for FP4 weights only).
    table : dict, optional
        A tuning table (default: the current device's, if shipped).
    """
    M = int(x.shape[0]) if hasattr(x, "shape") and len(x.shape) == 2 else 0
    if M < 1:
        raise ValueError("x must be a 2-D [M, K] array with M >= 1")
    if table is None:
        table = load_table()
    ch = dispatch(packed, M, mode=mode, table=table)
    if mode is not None and ch.kernel != "nestedfp":
        raise ValueError(f"mode={mode!r} applies to NestedFP layers only")
    if ch.kernel == "cc":
        return gemv_cc(x, packed, out=out, out_dtype=out_dtype)
    if ch.kernel == "engine":
        return gemm_tc(x, packed, out=out, out_dtype=out_dtype, cfg=ch.config)
    if np.dtype(out_dtype) != np.float16:
        raise ValueError(f"{ch.kernel} layers write float16 outputs only")
    if ch.kernel == "nestedfp":
        return packed(x, mode=mode or "fp16", y=out)
    return packed(x, y=out)
