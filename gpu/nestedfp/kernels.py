"""NestedFP: one FP16 weight copy as two byte planes, GEMM in FP16 or FP8 per call (CuPy).

Source: 004_a14d4b71d1ae7c1e.txt Sec. 4.2-4.3, 5.2. ``NestedFPLinear(w)`` checks the layer's
eligibility (every ``|w| <= threshold``), splits eligible FP16 weights on the GPU into the
upper (E4M3 of 256 w) and lower byte planes and drops the FP16 copy; an ineligible layer
keeps its FP16 weights and runs cuBLAS FP16 in both modes (the paper's exception layers).
``layer(x, mode='fp16')`` reconstructs FP16 weights in registers; ``layer(x, mode='fp8')``
quantizes activations per token to E4M3 and multiplies with the upper plane alone as E4M3,
times ``scale * 2**-8``. Both modes run on the GEMM engine (:mod:`mactile.gpu.engine`; FP8
partial sums promoted to FP32 every 128 of K) at every M. The small-M streaming kernel here
(``nestedfp_stream``, mma.sync) runs when a :class:`StreamConfig` is passed: once the M <= 8
default, it took 1-26% (FP16 mode) and 9-45% (FP8 mode) more time than the engine on every
benchmark shape once FP8 mode's quantizer was rewritten (H100, 2026-11-27; docs/gpu.md note
9), and stays as an independent second implementation for the tests.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mactile.golden.block import InputError
from mactile.golden.nestedfp import PAPER_THRESHOLD

from .. import prebuilt, runtime

__all__ = ["NestedFPLinear", "StreamConfig", "KPERM", "unpermute_k",
           "MODES", "split_planes", "quantize_e4m3"]

_SRC = Path(__file__).with_name("nestedfp.cu")
MODES = ("fp16", "fp8")
#: Physical byte p of every 16-wide K chunk holds logical k = KPERM[p] (see nestedfp.cu).
KPERM = np.array([2 * (p >> 2) + (p & 1) + ((p & 2) << 2) for p in range(16)])
ROW_PAD = 256  # the GEMM engine's largest CTA tile (four 64-row warpgroups)
K_PAD = 128
_SMS = 132  # H100 SXM multiprocessors (only used to size split-K; correctness never depends on it)
_SMEM_PER_SM = 228 * 1024


def unpermute_k(a):
    """Undo the in-chunk K permutation of a plane or FP8 activation matrix (NumPy)."""
    a = np.asarray(a)
    r, kp = a.shape
    out = np.empty_like(a)
    out.reshape(r, kp // 16, 16)[:, :, KPERM] = a.reshape(r, kp // 16, 16)
    return out


@dataclass(frozen=True)
class StreamConfig:
    """Shape of the small-M streaming kernel (``nestedfp_stream``): NT token tiles of 8
    (M <= 8 NT), RT row tiles of 16 per warp, WR x WK warps (rows x K), KU 64-wide K spans
    per warp and register buffer, ``sps`` spans per block (the K split; None: automatic),
    ``fuse``: quantize FP8-mode activations inside the kernel (else a separate launch)."""

    nt: int
    rt: int = 1
    wr: int = 4
    wk: int = 2
    ku: int = 2
    sps: int | None = None
    fuse: bool = True

    def __post_init__(self):
        for name in ("nt", "rt", "wr", "wk", "ku"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"StreamConfig.{name} must be a positive int, got {v!r}")
        if self.nt > 8:
            raise ValueError(f"StreamConfig.nt must be <= 8 (M <= 64), got {self.nt}")
        if self.wr * self.wk > 32:
            raise ValueError(f"StreamConfig: {self.wr * self.wk} warps exceed a block of 1024 threads")
        if ROW_PAD % (16 * self.rt * self.wr):
            raise ValueError(f"StreamConfig: 16*rt*wr = {16 * self.rt * self.wr} must divide {ROW_PAD}")

    @property
    def block_rows(self) -> int:
        return 16 * self.rt * self.wr

    def spans(self, kp: int, row_blocks: int) -> int:
        """64-wide K spans per block: about 4 blocks per SM, shared-memory activations <= 96 KB."""
        total = kp // 64
        if self.sps is not None:
            return max(1, min(self.sps, total))
        splits = max(1, -(-4 * _SMS // row_blocks))
        sps = max(self.wk * self.ku, -(-total // splits))
        sps = min(sps, max(1, 96 // self.nt))
        return min(sps, total)

    def smem(self, sps: int) -> int:
        acts = self.nt * sps * 1024 + 8 * self.nt * 4
        red = self.wk * 8 * self.nt * (self.block_rows + 1) * 4
        return max(acts, red)


def _source() -> str:
    return runtime.load_source(_SRC)  # inlines ptx.cuh (the shared PTX wrappers)


def _kernel(name: str, smem: int = 0):
    return prebuilt.get_kernel(_source(), name, max_dynamic_smem=smem)


def _stream_name(mode: str, xq: int, cfg: StreamConfig) -> str:
    return (f"nfp::nestedfp_stream<{MODES.index(mode)}, {xq}, {cfg.nt}, {cfg.rt}, {cfg.wr}, "
            f"{cfg.wk}, {cfg.ku}>")


def _stream_xq(mode: str, cfg: StreamConfig) -> int:
    return 0 if mode == "fp16" else (1 if cfg.fuse else 2)


#: Streaming shapes (nt, rt, wr, wk, ku) the tests use (prebuilt with StreamConfig(nt)).
STREAM_TEST = ((1, 1, 4, 2, 2), (1, 2, 2, 3, 1), (5, 1, 2, 2, 3), (8, 1, 4, 2, 2), (2, 1, 8, 1, 4))

def prebuilt_jobs():
    """(source, names) for :mod:`mactile.gpu.prebuilt` (tests' and benchmarks' shapes)."""
    names = {"nfp::nestedfp_split", "nfp::nestedfp_quant_e4m3"}
    stream = {StreamConfig(*t) for t in STREAM_TEST} | {StreamConfig(nt) for nt in range(1, 9)}
    for c in stream:
        names.add(_stream_name("fp16", 0, c))
        names.add(_stream_name("fp8", 1, c))
        names.add(_stream_name("fp8", 2, c))
    return [(_source(), sorted(names))]


def split_planes(w):
    """Split FP16 weights (CuPy (N, K)) into padded, K-permuted (upper, lower) uint8 planes."""
    cp = runtime.require_cupy()
    n, k = w.shape
    np_, kp = -(-n // ROW_PAD) * ROW_PAD, -(-k // K_PAD) * K_PAD
    upper = cp.empty((np_, kp), dtype=cp.uint8)
    lower = cp.empty((np_, kp), dtype=cp.uint8)
    flag = cp.zeros(1, dtype=cp.int32)
    total = np_ * (kp // 16)
    _kernel("nfp::nestedfp_split")(((total + 255) // 256,), (256,),
                                   (w.view(cp.uint16), np.int32(n), np.int32(k), np.int32(np_),
                                    np.int32(kp), upper, lower, flag))
    if int(flag.get()[0]):
        raise InputError("nestedfp: a weight has |w| >= 2 (FP16 exponent MSB set); "
                         "keep this layer in FP16")
    return upper, lower


def _quant_threads(k: int) -> int:
    """Threads per row of ``nestedfp_quant_e4m3``: about two 16-wide chunks each (one round
    trip of four 16-byte loads), 128 to 1024."""
    return min(1024, max(128, -(-k // 1024) * 32))


def quantize_e4m3(x, kp: int, *, check_finite: bool = True, into=None, flag=None, pdl: bool = False):
    """Per-token E4M3 codes (CuPy uint8 (M, kp), K-permuted, zero-padded) and FP32 scales.

    ``into=(codes, scales)`` and ``flag`` (int32 (1,)) are optional preallocated buffers.
    ``pdl``: programmatic dependent launch (the kernel waits for the previous kernel before
    reading ``x`` and lets the GEMM that follows it become resident at once)."""
    cp = runtime.require_cupy()
    m, k = x.shape
    if k % 16:
        raise InputError(f"quantize_e4m3: K = {k} must be a multiple of 16 (the kernel's 16-wide chunks)")
    if x.data.ptr % 16:  # the kernel reads 16-byte vectors (rows are whole 32-byte chunks)
        x = x.copy()
    if into is None:
        xq = cp.empty((m, kp), dtype=cp.uint8)
        sc = cp.empty((m,), dtype=cp.float32)
    else:
        xq, sc = into
    if flag is None:
        flag = cp.zeros(1, dtype=cp.int32)
    elif check_finite:
        flag.fill(0)
    args = (x, np.int32(m), np.int32(k), np.int32(x.shape[1]), np.int32(kp), xq, sc, flag)
    fn = _kernel("nfp::nestedfp_quant_e4m3")
    if pdl:
        from ..launch import launch  # noqa: PLC0415
        launch(fn, (m,), (_quant_threads(k),), args, pdl=True)
    else:
        fn((m,), (_quant_threads(k),), args)
    if check_finite and int(flag.get()[0]):
        raise InputError("nestedfp: activations hold NaN or Inf")
    return xq, sc


class NestedFPLinear:
    """``y = x @ w.T`` from one 16-bit weight copy, in FP16 or FP8 mode per call.

    Parameters
    ----------
    weight : CuPy float16 (N, K), K a multiple of 16.
    threshold : eligibility limit on ``|w|`` (default the paper's 1.75).
    keep_fp16 : keep the FP16 copy as well (tests only; NestedFP's point is not to).
    """

    def __init__(self, weight, *, threshold: float = PAPER_THRESHOLD, keep_fp16: bool = False):
        cp = runtime.require_cupy()
        if not isinstance(weight, cp.ndarray) or weight.dtype != cp.float16 or weight.ndim != 2:
            raise InputError("nestedfp: weight must be a 2-d CuPy float16 array, got "
                             f"{type(weight).__name__} {getattr(weight, 'dtype', '')} "
                             f"{getattr(weight, 'shape', '')}")
        if not 0 < threshold < 1.9375:
            raise ValueError(f"nestedfp: threshold must lie in (0, 1.9375), got {threshold}")
        n, k = weight.shape
        if n == 0 or k == 0 or k % 16:
            raise InputError(f"nestedfp: K = {k} must be a positive multiple of 16 (N = {n})")
        weight = cp.ascontiguousarray(weight)
        self.n, self.k = n, k
        self.kp = -(-k // K_PAD) * K_PAD
        self.threshold = float(threshold)
        # Golden nestedfp_eligible: every |w| <= threshold (NaN makes a layer ineligible).
        amax = cp.abs(weight.astype(cp.float32)).max()
        self.eligible = bool(amax <= threshold)
        self.upper = self.lower = None
        self.weight = weight if (keep_fp16 or not self.eligible) else None
        if self.eligible:
            self.upper, self.lower = split_planes(weight)
        self._ws = None
        self._counters = None
        self._fp8: dict = {}  # reused E4M3 activation buffers per M
        self._flag = cp.zeros(1, dtype=cp.int32)
        self._dummy_f = cp.zeros(1, dtype=cp.float32)
        self._dummy_i = cp.zeros(1, dtype=cp.int32)

    def planes(self):
        """The (upper, lower) planes as NumPy (N, K) in plain K order (for checks)."""
        if not self.eligible:
            raise ValueError("nestedfp: this layer is not eligible; it has no planes")
        u = unpermute_k(self.upper.get())[: self.n, : self.k]
        lo = unpermute_k(self.lower.get())[: self.n, : self.k]
        return u, lo

    def _workspace(self, m: int, tiles: int):
        cp = runtime.require_cupy()
        if self._ws is None or self._ws.shape[0] < m:
            self._ws = cp.zeros((m, self.n), dtype=cp.float32)
        if self._counters is None or self._counters.size < tiles:
            self._counters = cp.zeros(tiles, dtype=cp.int32)
        return self._ws, self._counters

    def _stream(self, x, mode: str, cfg: StreamConfig, check_finite: bool, y):
        """Small-M streaming kernel (weights read once with 16-byte loads, mma.sync)."""
        cp = runtime.require_cupy()
        m = x.shape[0]
        if m > 8 * cfg.nt:
            raise InputError(f"nestedfp: the streaming kernel takes M <= {8 * cfg.nt} with "
                             f"nt={cfg.nt}, got M = {m}")
        if x.data.ptr % 16:  # the prologue reads 16-byte vectors
            x = x.copy()
        np_ = self.upper.shape[0]
        row_blocks = np_ // cfg.block_rows
        sps = cfg.spans(self.kp, row_blocks)
        grid = (row_blocks, -(-(self.kp // 64) // sps))
        if grid[1] > 1:
            ws, cnt = self._workspace(m, row_blocks)
        else:
            ws, cnt = self._dummy_f, self._dummy_i
        xq = _stream_xq(mode, cfg)
        if xq == 2:
            buf = self._fp8.get(m)
            if buf is None:
                buf = self._fp8[m] = (cp.empty((m, self.kp), dtype=cp.uint8),
                                      cp.empty((m,), dtype=cp.float32))
            xsrc, xs = quantize_e4m3(x, self.kp, check_finite=check_finite, into=buf,
                                     flag=self._flag)
        else:
            xsrc, xs = x, self._dummy_f
            if check_finite and xq == 1:
                self._flag.fill(0)
        smem = cfg.smem(sps)
        fn = _kernel(_stream_name(mode, xq, cfg), smem)
        if smem <= 48 * 1024:
            fn.max_dynamic_shared_size_bytes = smem
        fn(grid, (32 * cfg.wr * cfg.wk,),
           (self.upper, self.lower, xsrc, xs, y, ws, cnt, self._flag, np.int32(m),
            np.int32(self.n), np.int32(self.k), np.int32(self.kp), np.int32(np_),
            np.int32(x.shape[1]), np.int32(sps)), shared_mem=smem)
        if check_finite and xq == 1 and int(self._flag.get()[0]):
            raise InputError("nestedfp: activations hold NaN or Inf")
        return y

    def __call__(self, x, *, mode: str = "fp16", config=None, check_finite: bool = False, y=None):
        """``x``: CuPy float16 (M, K). Returns float16 (M, N) (into ``y`` when given).

        ``config``: an :class:`~mactile.gpu.engine.EngineConfig` (the GEMM engine), a
        :class:`StreamConfig` (the small-M streaming kernel), or None: the engine with the
        device's tuning table or its default configuration."""
        cp = runtime.require_cupy()
        from ..engine import EngineConfig, gemm_fp8, gemm_planes, use_pdl  # noqa: PLC0415
        if mode not in MODES:
            raise ValueError(f"nestedfp: mode must be one of {MODES}, got {mode!r}")
        if not isinstance(x, cp.ndarray) or x.dtype != cp.float16 or x.ndim != 2:
            raise InputError("nestedfp: activations must be a 2-d CuPy float16 array")
        if x.shape[1] != self.k or x.shape[0] == 0:
            raise InputError(f"nestedfp: activations {x.shape} do not match K = {self.k}")
        if config is not None and not isinstance(config, (StreamConfig, EngineConfig)):
            raise TypeError(f"nestedfp: config must be a StreamConfig or EngineConfig, got {type(config).__name__}")
        x = cp.ascontiguousarray(x)
        m = x.shape[0]
        if y is None:
            y = cp.empty((m, self.n), dtype=cp.float16)
        elif y.shape != (m, self.n) or y.dtype != cp.float16 or not y.flags.c_contiguous:
            raise InputError(f"nestedfp: y must be a C-contiguous float16 array of shape "
                             f"{(m, self.n)}, got {y.dtype} {y.shape}")
        if not self.eligible:  # exception layer: FP16 in both modes (Sec. 5.1)
            cp.matmul(x, self.weight.T, out=y)
            return y
        if isinstance(config, StreamConfig):
            return self._stream(x, mode, config, check_finite, y)
        if config is None:
            from ..tuning import engine_choice, load_table  # noqa: PLC0415
            from ..formats import nestedfp_format  # noqa: PLC0415
            fmt = nestedfp_format(mode).name
            config, _ = engine_choice(load_table(), fmt, self.k, self.n, m)
        if mode == "fp16":
            return gemm_planes(x, self.upper, self.lower, self.n, cfg=config, out=y, pdl=use_pdl(m))
        buf = self._fp8.get(m)
        if buf is None:
            buf = self._fp8[m] = (cp.empty((m, self.kp), dtype=cp.uint8), cp.empty((m,), dtype=cp.float32))
        xq, xs = quantize_e4m3(x, self.kp, check_finite=check_finite, into=buf, flag=self._flag,
                               pdl=use_pdl(m))
        return gemm_fp8(xq, xs, self.upper, self.n, cfg=config, out=y, pdl=use_pdl(m))
