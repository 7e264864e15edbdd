"""FlexQ W6A6 / W6A8 GEMM on Hopper's binary tensor cores (CuPy).

Source: 003_c7ba18c8b0833de1.txt Sec. 4.1-4.3. ``FlexQLinear`` holds INT6 group-quantized
weights as packed bit planes (offline: :func:`~mactile.gpu.flexq.layout.pack_quantized`
from a golden ``int-group`` tensor, or on the GPU from FP16 weights with the same bits);
each call quantizes the FP16 activations per token per group of 128 to 6 or 8 bits and
packs their planes in one kernel, then runs the bit-plane GEMM with the group scales in
the epilogue.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mactile.golden.block import InputError

from .. import pdl, prebuilt, runtime
from .codegen import schedule_source
from .layout import ACT_TILE, GROUP, WEIGHT_TILE, PackedPlanes, planes_shape

__all__ = ["FlexQLinear", "GemmConfig", "FusedConfig", "choose_config", "choose_fused",
           "GpuPlanes", "quantize_pack"]

_SRC = Path(__file__).with_name("flexq.cu")
WEIGHT_BITS = 6
ACT_BITS = (6, 8)
OUT_KINDS = {"float16": 0, "float32": 1, "int": 2}


@dataclass(frozen=True)
class GemmConfig:
    """Kernel shape: MT token tiles (8 each), RT weight tiles (16 rows) per warp, WR x WK
    warps (rows x K split), U groups in flight per warp."""

    mt: int
    rt: int = 1
    wr: int = 1
    wk: int = 8
    u: int = 4

    def __post_init__(self):
        for name in ("mt", "rt", "wr", "wk", "u"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"GemmConfig.{name} must be a positive int, got {v!r}")
        if self.wr * self.wk > 32:
            raise ValueError(f"GemmConfig: {self.wr * self.wk} warps exceed a block of 1024 threads")

    @property
    def block_rows(self) -> int:
        return 16 * self.rt * self.wr

    @property
    def block_tokens(self) -> int:
        return 8 * self.mt


#: Measured two-launch GEMM shapes per weight shape (N, K) for M <= 8 (from the sweeps in
#: docs/results; docs/gpu.md). Other shapes use :func:`choose_config`'s rule.
GEMM_TABLE: dict = {}

#: M <= 8 default: 32 rows and 16 warps along K per block, one group in flight per warp
#: (the best or tied-best of the sweeps on the benchmark shapes, docs/gpu.md) ...
SMALL_M_CONFIG = GemmConfig(mt=1, rt=2, wr=1, wk=16, u=1)
#: ... unless that grid has no more blocks than the GPU has SMs: then 16 rows per block and
#: two groups in flight per warp, twice the blocks (measured on the H100, 2026-11-27: N =
#: 4096 at M = 1, 9.2 -> 8.5 us at K = 4096 and 20.9 -> 20.1 us at K = 14336; with more
#: blocks than SMs the 32-row blocks stay faster, e.g. 10.5 against 11.7 us at N = 6144).
SMALL_M_NARROW_CONFIG = GemmConfig(mt=1, rt=1, wr=1, wk=16, u=2)


def choose_config(m: int, n: int, groups: int, sms: int | None = None) -> GemmConfig:
    """Default kernel shape for M tokens (the measured choices are in docs/gpu.md);
    ``sms``: the GPU's SM count (None: the current device's)."""
    mt = 1 if m <= 8 else 2 if m <= 16 else 4 if m <= 32 else 8
    if mt == 1:
        hit = GEMM_TABLE.get((n, groups * GROUP))
        if hit is not None:
            return hit
        blocks = -(-n // (WEIGHT_TILE * SMALL_M_CONFIG.rt * SMALL_M_CONFIG.wr))
        if blocks <= (_sm_count() if sms is None else sms):
            return SMALL_M_NARROW_CONFIG
        return SMALL_M_CONFIG
    if mt == 2:
        return GemmConfig(mt=mt, rt=1, wr=1, wk=8, u=4)
    if mt == 4:
        return GemmConfig(mt=mt, rt=1, wr=2, wk=4, u=2)
    return GemmConfig(mt=mt, rt=1, wr=2, wk=4, u=1)


@dataclass(frozen=True)
class FusedConfig:
    """Shape of the fused small-M kernel (``flexq_fused``): MT token tiles (M <= 8 MT), RT
    weight tiles per warp, WR x WK warps, U groups per warp and buffer (two buffers in
    flight), C blocks per cluster sharing the activation quantization, and ``gps`` groups
    per block (the K split: ``ceil(G / gps)`` blocks along K; None: all groups)."""

    mt: int = 1
    rt: int = 2
    wr: int = 4
    wk: int = 2
    u: int = 1
    c: int = 1
    gps: int | None = None

    def __post_init__(self):
        for name in ("mt", "rt", "wr", "wk", "u", "c"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"FusedConfig.{name} must be a positive int, got {v!r}")
        if self.mt > 2:
            raise ValueError(f"FusedConfig.mt must be 1 or 2 (M <= 16), got {self.mt}")
        if self.wr * self.wk > 32:
            raise ValueError(f"FusedConfig: {self.wr * self.wk} warps exceed a block of 1024 threads")
        if self.c not in (1, 2, 4, 8):
            raise ValueError(f"FusedConfig.c (cluster size) must be 1, 2, 4 or 8, got {self.c}")
        if self.gps is not None and (not isinstance(self.gps, int) or self.gps < 1):
            raise ValueError(f"FusedConfig.gps must be a positive int or None, got {self.gps!r}")

    @property
    def block_rows(self) -> int:
        return 16 * self.rt * self.wr

    @property
    def block_tokens(self) -> int:
        return 8 * self.mt

    def groups_per_block(self, groups: int) -> int:
        return groups if self.gps is None else min(self.gps, groups)

    def grid(self, n_wtiles: int, groups: int) -> tuple[int, int]:
        gx = -(-n_wtiles // (self.rt * self.wr))
        gx = -(-gx // self.c) * self.c  # whole clusters
        return gx, -(-groups // self.groups_per_block(groups))

    def smem(self, bits_a: int, groups: int) -> int:
        gps = self.groups_per_block(groups)
        acts = (self.mt * gps * 32 * bits_a + gps * self.block_tokens) * 4
        red = self.wk * self.block_tokens * self.block_rows * 4
        return max(acts, red)


#: Measured fused-kernel choices per weight shape (N, K) for M <= 8 (filled from the
#: sweep in docs/results; see docs/gpu.md). Shapes not listed use :func:`choose_fused`'s rule.
FUSED_TABLE: dict = {}


def choose_fused(m: int, n: int, groups: int) -> FusedConfig | None:
    """Fused-kernel shape for M tokens where the measured table prefers the fused kernel
    over the two launches, else None."""
    if m > 8:
        return None
    return FUSED_TABLE.get((n, groups * GROUP))


@dataclass
class GpuPlanes:
    """Packed planes on the GPU (layout of :class:`~mactile.gpu.flexq.layout.PackedPlanes`)."""

    planes: object   # cupy uint32 (tiles, groups, words/V, 32, V): layout.planes_shape
    scales: object   # cupy float16 (groups, rows_pad)
    rows: int
    k: int
    bits: int
    tile: int

    @property
    def rows_pad(self) -> int:
        return int(self.scales.shape[1])

    def to_host(self) -> PackedPlanes:
        return PackedPlanes(self.planes.get(), self.scales.get().view(np.uint16), self.rows,
                            self.k, self.bits, self.tile)


def _source(singles: str) -> str:
    # load_source inlines ptx.cuh (the shared PTX wrappers) for NVRTC and nvcc alike.
    return (runtime.load_source(_SRC, prelude=f"#define FLEXQ_GROUP {GROUP}")
            .replace("FLEXQ_GENERATED_SCHEDULES",
                     schedule_source(((WEIGHT_BITS, 6), (WEIGHT_BITS, 8)), singles=singles)))


def _kernel(singles: str, name: str, smem: int = 0):
    return prebuilt.get_kernel(_source(singles), name, max_dynamic_smem=smem)


def _gemm_name(q: int, cfg: GemmConfig, out: str) -> str:
    return (f"flexq::flexq_gemm<{WEIGHT_BITS}, {q}, {cfg.mt}, {cfg.rt}, {cfg.wr}, {cfg.wk}, "
            f"{cfg.u}, {OUT_KINDS[out]}>")


def _fused_name(q: int, cfg: FusedConfig, out: str) -> str:
    return (f"flexq::flexq_fused<{WEIGHT_BITS}, {q}, {cfg.mt}, {cfg.rt}, {cfg.wr}, {cfg.wk}, "
            f"{cfg.u}, {cfg.c}, {OUT_KINDS[out]}>")


#: Fused-kernel shapes (mt, rt, wr, wk, u, c) the tests and the benchmark sweep use.
FUSED_TEST = ((1, 2, 4, 2, 1, 4), (1, 1, 2, 3, 2, 1), (2, 1, 4, 2, 1, 2), (1, 2, 2, 2, 2, 8))
FUSED_SWEEP = ((1, 2, 4, 2, 1, 1), (1, 2, 4, 1, 2, 4), (1, 2, 8, 1, 1, 8),
               (1, 2, 1, 8, 2, 1), (1, 2, 1, 8, 2, 8), (1, 2, 2, 4, 2, 8), (1, 1, 1, 8, 4, 8))

#: Kernel shapes the tests and the benchmark sweep use besides :func:`choose_config`'s.
TEST_CONFIGS = ((1, 1, 1, 8, 4), (2, 2, 2, 3, 2), (4, 1, 4, 2, 1), (8, 1, 2, 4, 1), (8, 2, 1, 5, 3))
SWEEP_CONFIGS = ((8, 1, 4, 2, 1), (8, 2, 2, 4, 1), (8, 1, 1, 8, 1), (1, 1, 1, 4, 4),
                 (1, 2, 1, 8, 2), (1, 1, 2, 4, 4), (4, 1, 1, 8, 2), (2, 1, 2, 4, 4),
                 (1, 2, 1, 8, 4), (1, 4, 1, 8, 1), (1, 4, 1, 8, 2), (1, 1, 1, 8, 4), (1, 2, 2, 4, 2),
                 (1, 2, 1, 4, 4), (1, 1, 1, 16, 2), (1, 2, 1, 16, 1), (1, 4, 1, 4, 2))


def prebuilt_jobs():
    """(source, names) for :mod:`mactile.gpu.prebuilt`: every instantiation used by the
    tests and benchmarks."""
    defaults = [choose_config(m, 4096, 32, sms=1) for m in (1, 16, 32, 64)] + [SMALL_M_NARROW_CONFIG]
    tests = [GemmConfig(*c) for c in TEST_CONFIGS]
    sweep = [GemmConfig(*c) for c in SWEEP_CONFIGS]
    quant = [f"flexq::flexq_quantize_pack<{b}, {t}>" for b, t in ((6, 8), (8, 8), (6, 16))]
    jobs = []
    for singles in ("k128", "k256"):
        names = list(quant)
        for q in ACT_BITS:
            names += [_gemm_name(q, c, "int") for c in defaults + tests]
            names += [_gemm_name(q, c, "float16") for c in defaults + tests]
            if singles == "k128":
                names += [_gemm_name(q, c, "float32") for c in defaults]
                names += [_gemm_name(q, c, "float16") for c in sweep]
        full = {FusedConfig(*t) for t in FUSED_TEST}
        for q in ACT_BITS:
            for c in full | {FusedConfig(*t) for t in FUSED_SWEEP}:
                kinds = ("int", "float16", "float32") if c in full else ("float16",)
                if singles == "k256":
                    kinds = ("int",) if c == FusedConfig(*FUSED_TEST[0]) else ()
                names += [_fused_name(q, c, o) for o in kinds]
        jobs.append((_source(singles), names))
    return jobs


_SMS: list = []


def _sm_count() -> int:
    if not _SMS:
        cp = runtime.require_cupy()
        _SMS.append(int(cp.cuda.Device().attributes["MultiProcessorCount"]))
    return _SMS[0]


def _check_fp16_matrix(cp, x, what: str):
    if not isinstance(x, cp.ndarray):
        raise InputError(f"flexq: {what} must be a CuPy array, got {type(x).__name__}")
    if x.dtype != cp.float16 or x.ndim != 2:
        raise InputError(f"flexq: {what} must be a 2-d float16 array, got {x.dtype} {x.shape}")
    if x.shape[1] == 0 or x.shape[1] % GROUP:
        raise InputError(f"flexq: {what} has K = {x.shape[1]}, not a positive multiple of the "
                         f"group size {GROUP}")
    if x.shape[0] == 0:
        raise InputError(f"flexq: {what} has no rows")
    return cp.ascontiguousarray(x)


def quantize_pack(x, *, bits: int, tile: int, rows_pad: int | None = None,
                  check_finite: bool = True, singles: str = "k128", into: GpuPlanes | None = None,
                  flag=None, pdl_launch: bool = False) -> GpuPlanes:
    """Quantize FP16 rows per group of 128 to ``bits`` (golden IntGroup, bit-exact) and pack.

    ``tile=8`` gives the activation layout, ``tile=16`` the weight layout. With
    ``check_finite`` a NaN/Inf input raises :class:`InputError` (one device sync).
    ``into``/``flag``: preallocated buffers (so that the call allocates nothing, e.g. inside
    a CUDA graph); ``flag`` is an int32 (1,) array that the kernel ORs 1 into on NaN/Inf.
    ``pdl_launch``: programmatic dependent launch (the kernel waits for the previous kernel
    before it reads ``x`` or writes its outputs, so only its launch overlaps).
    """
    cp = runtime.require_cupy()
    if bits not in (6, 8):
        raise ValueError(f"flexq: bits must be 6 or 8, got {bits}")
    if tile not in (WEIGHT_TILE, ACT_TILE):
        raise ValueError(f"flexq: tile must be {WEIGHT_TILE} or {ACT_TILE}, got {tile}")
    x = _check_fp16_matrix(cp, x, "input")
    rows, k = x.shape
    g = k // GROUP
    rp = -(-rows // tile) * tile if rows_pad is None else int(rows_pad)
    if rp < rows or rp % tile:
        raise ValueError(f"flexq: rows_pad {rp} must be >= {rows} and a multiple of {tile}")
    words = bits * tile // 8
    if into is not None:
        if (into.planes.shape != planes_shape(rp // tile, g, words) or into.scales.shape != (g, rp)
                or into.bits != bits or into.tile != tile):
            raise ValueError("flexq: 'into' planes do not match this input")
        planes, scales = into.planes, into.scales
    else:
        planes = cp.empty(planes_shape(rp // tile, g, words), dtype=cp.uint32)
        scales = cp.empty((g, rp), dtype=cp.float16)
    if flag is None:
        flag = cp.zeros(1, dtype=cp.int32)
    elif check_finite:
        flag.fill(0)
    fn = _kernel(singles, f"flexq::flexq_quantize_pack<{bits}, {tile}>")
    warps = rp * g
    args = (x, np.int32(rows), np.int32(k), np.int32(x.shape[1]), np.int32(rp), planes, scales, flag)
    if pdl_launch:
        pdl.launch(fn, ((warps + 7) // 8,), (256,), args)
    else:
        fn(((warps + 7) // 8,), (256,), args)
    if check_finite and int(flag.get()[0]):
        raise InputError("flexq: input holds NaN or Inf")
    if into is not None:
        into.rows = rows
        return into
    return GpuPlanes(planes, scales, rows, k, bits, tile)


#: Up to this M the activation quantizer of a layer with ``pdl_launch`` is launched with
#: programmatic dependent launch too, after the previous kernel (e.g. the previous layer's
#: GEMM); it waits for that kernel before it reads. Same process, H100, 2026-11-27
#: (docs/gpu.md, FlexQ on the decode path), geomean over nine layers: 2.2% / 1.3% / 1.9%
#: less time at M = 1 / 8 / 16, 0.3% at M = 32, 0.2% more at M = 64.
QUANT_PDL_MAX_M = 16


class FlexQLinear:
    """``y = x @ w.T`` with INT6 weights and INT6/INT8 activations on binary tensor cores.

    Parameters
    ----------
    weight : golden ``int-group`` Quantized (bits 6, group 128, shape (N, K)), a
        :class:`~mactile.gpu.flexq.layout.PackedPlanes` with tile 16, or a CuPy float16
        (N, K) array (quantized and packed on the GPU, bit-exact with golden IntGroup).
    act_bits : default activation width, 6 (W6A6) or 8 (W6A8, FlexQ's down_proj).
    singles : how an odd plane pair is issued: 'k128' (m16n8k128) or 'k256' (zero half).
    pdl_launch : launch the GEMM with programmatic dependent launch after the activation
        quantize kernel (None: when the CUDA driver library loads); results are identical.
    """

    def __init__(self, weight, *, act_bits: int = 6, singles: str = "k128",
                 pdl_launch: bool | None = None):
        cp = runtime.require_cupy()
        # Programmatic dependent launch of the GEMM after the activation quantize launch
        # (the GEMM streams its first weights while the activations are packed); None: when
        # the driver library loads (mactile.gpu.launch).
        self.pdl_launch = pdl.available() if pdl_launch is None else bool(pdl_launch)
        if self.pdl_launch and not pdl.available():
            raise ValueError("flexq: pdl_launch=True needs the CUDA driver library (libcuda)")
        if act_bits not in ACT_BITS:
            raise ValueError(f"flexq: act_bits must be one of {ACT_BITS}, got {act_bits}")
        if singles not in ("k128", "k256"):
            raise ValueError(f"flexq: singles must be 'k128' or 'k256', got {singles!r}")
        self.act_bits = act_bits
        self.singles = singles
        if isinstance(weight, cp.ndarray):
            w = quantize_pack(weight, bits=WEIGHT_BITS, tile=WEIGHT_TILE)
        else:
            from mactile.golden.block import Quantized

            from .layout import pack_quantized
            p = pack_quantized(weight, tile=WEIGHT_TILE) if isinstance(weight, Quantized) else weight
            if not isinstance(p, PackedPlanes) or p.tile != WEIGHT_TILE:
                raise InputError("flexq: weight must be an int-group Quantized, PackedPlanes "
                                 "(tile 16) or a CuPy float16 matrix")
            if p.bits != WEIGHT_BITS:
                raise InputError(f"flexq: weights must be {WEIGHT_BITS}-bit, got {p.bits}")
            w = GpuPlanes(cp.asarray(p.planes), cp.asarray(p.scales).view(cp.float16),
                          p.rows, p.k, p.bits, p.tile)
        self.w = w
        self.n, self.k = w.rows, w.k
        self._acts: dict = {}  # reused activation buffers per (rows_pad, bits)
        self._flag = cp.zeros(1, dtype=cp.int32)
        self._ws = None        # fused kernel's split-K FP32 workspace (kept zero between calls)
        self._counters = None  # and its per-row-block arrival counters

    @property
    def groups(self) -> int:
        return self.k // GROUP

    def quantize_activations(self, x, *, act_bits: int | None = None, config=None,
                             check_finite: bool = True) -> GpuPlanes:
        """The fused online quantize + bit-pack kernel for activations (tile 8)."""
        bits = self.act_bits if act_bits is None else act_bits
        if bits not in ACT_BITS:
            raise ValueError(f"flexq: act_bits must be one of {ACT_BITS}, got {bits}")
        cp = runtime.require_cupy()
        x = _check_fp16_matrix(cp, x, "activations")
        if x.shape[1] != self.k:
            raise InputError(f"flexq: activations have K = {x.shape[1]}, weights K = {self.k}")
        cfg = config or choose_config(x.shape[0], self.n, self.groups)
        rp = -(-x.shape[0] // cfg.block_tokens) * cfg.block_tokens
        buf = self._acts.get((rp, bits))
        if buf is None:
            buf = self._acts[(rp, bits)] = GpuPlanes(
                cp.empty(planes_shape(rp // ACT_TILE, self.groups, bits), dtype=cp.uint32),
                cp.empty((self.groups, rp), dtype=cp.float16), x.shape[0], self.k, bits, ACT_TILE)
        # The returned planes live in a buffer this layer reuses on its next call.
        return quantize_pack(x, bits=bits, tile=ACT_TILE, rows_pad=rp, check_finite=check_finite,
                             singles=self.singles, into=buf, flag=self._flag,
                             pdl_launch=self.pdl_launch and x.shape[0] <= QUANT_PDL_MAX_M)

    def matmul_planes(self, xp: GpuPlanes, *, out: str = "float16", config=None, y=None,
                      _pdl: bool = False):
        """GEMM on packed activations; ``out``: 'float16', 'float32' or 'int' (int32
        ``(M, N, groups)`` per-group integer results before scaling). ``y``: optional
        preallocated C-contiguous destination of that dtype and shape."""
        cp = runtime.require_cupy()
        if out not in OUT_KINDS:
            raise ValueError(f"flexq: out must be one of {tuple(OUT_KINDS)}, got {out!r}")
        if xp.tile != ACT_TILE or xp.k != self.k or xp.bits not in ACT_BITS:
            raise InputError("flexq: activation planes do not match this layer")
        m = xp.rows
        cfg = config or choose_config(m, self.n, self.groups)
        if xp.rows_pad % cfg.block_tokens:
            raise InputError(f"flexq: activation rows padded to {xp.rows_pad}, not a multiple "
                             f"of the config's {cfg.block_tokens} tokens")
        g = self.groups
        shape = (m, self.n, g) if out == "int" else (m, self.n)
        dtype = {"int": cp.int32, "float16": cp.float16, "float32": cp.float32}[out]
        if y is None:
            y = cp.empty(shape, dtype=dtype)
        elif y.shape != shape or y.dtype != dtype or not y.flags.c_contiguous:
            raise InputError(f"flexq: y must be a C-contiguous {np.dtype(dtype)} array of "
                             f"shape {shape}, got {y.dtype} {y.shape}")
        n_wtiles = self.w.planes.shape[0]
        smem = 0 if out == "int" else cfg.wk * cfg.block_tokens * cfg.block_rows * 4
        fn = _kernel(self.singles, _gemm_name(xp.bits, cfg, out), smem)
        grid = (-(-n_wtiles // (cfg.rt * cfg.wr)), xp.rows_pad // cfg.block_tokens)
        args = (self.w.planes, self.w.scales, xp.planes, xp.scales, y, np.int32(m),
                np.int32(self.n), np.int32(g), np.int32(n_wtiles), np.int32(self.w.rows_pad),
                np.int32(xp.rows_pad))
        # PDL only right after this layer's own activation-quantize launch (__call__), and only
        # for grids of more blocks than SMs: measured on the H100, a sub-wave grid (128 blocks:
        # o_proj, down_proj) launched early came out slower (down_proj M <= 8: 24.6 vs 21.1 us;
        # M = 64: 1.4x slower), presumably because its blocks are placed while the quantize
        # blocks still hold SMs; larger grids gained 0.6-1.2 us (docs/gpu.md notes).
        if _pdl and grid[0] * grid[1] > _sm_count():
            pdl.launch(fn, grid, (cfg.wr * cfg.wk * 32,), args, shared_mem=smem)
        else:
            fn(grid, (cfg.wr * cfg.wk * 32,), args, shared_mem=smem)
        return y

    def _fused(self, x, bits: int, out: str, cfg: FusedConfig, check_finite: bool, y):
        """One launch: quantize + pack in the block prologue, then the GEMM (M <= 8 MT)."""
        cp = runtime.require_cupy()
        x = _check_fp16_matrix(cp, x, "activations")
        m, k = x.shape
        if k != self.k:
            raise InputError(f"flexq: activations have K = {k}, weights K = {self.k}")
        if m > cfg.block_tokens:
            raise InputError(f"flexq: the fused kernel takes M <= {cfg.block_tokens} with "
                             f"mt={cfg.mt}, got M = {m}")
        g = self.groups
        shape = (m, self.n, g) if out == "int" else (m, self.n)
        dtype = {"int": cp.int32, "float16": cp.float16, "float32": cp.float32}[out]
        if y is None:
            y = cp.empty(shape, dtype=dtype)
        elif y.shape != shape or y.dtype != dtype or not y.flags.c_contiguous:
            raise InputError(f"flexq: y must be a C-contiguous {np.dtype(dtype)} array of "
                             f"shape {shape}, got {y.dtype} {y.shape}")
        n_wtiles = self.w.planes.shape[0]
        grid = cfg.grid(n_wtiles, g)
        if self._ws is None or self._ws.shape[0] < 16:
            self._ws = cp.zeros((16, self.n), dtype=cp.float32)  # cleared by the last block
        if self._counters is None or self._counters.size < grid[0]:
            self._counters = cp.zeros(grid[0], dtype=cp.int32)
        if check_finite:
            self._flag.fill(0)
        smem = cfg.smem(bits, g)
        fn = _kernel(self.singles, _fused_name(bits, cfg, out), smem)
        fn(grid, (cfg.wr * cfg.wk * 32,),
           (self.w.planes, self.w.scales, x, np.int32(x.shape[1]), y, self._ws, self._counters,
            self._flag, np.int32(m), np.int32(self.n), np.int32(g), np.int32(n_wtiles),
            np.int32(self.w.rows_pad), np.int32(cfg.groups_per_block(g))), shared_mem=smem)
        if check_finite and int(self._flag.get()[0]):
            raise InputError("flexq: input holds NaN or Inf")
        return y

    def __call__(self, x, *, act_bits: int | None = None, out: str = "float16", config=None,
                 check_finite: bool = False, y=None):
        """``y = x @ w.T`` (M, N), FP16 by default. ``check_finite`` syncs to refuse NaN/Inf.

        A :class:`FusedConfig` (or a measured :data:`FUSED_TABLE` entry for M <= 8) runs the
        fused one-launch kernel; otherwise the activations are quantized and packed in a
        separate launch first (a :class:`GemmConfig` or :func:`choose_config`)."""
        bits = self.act_bits if act_bits is None else act_bits
        if bits not in ACT_BITS:
            raise ValueError(f"flexq: act_bits must be one of {ACT_BITS}, got {bits}")
        if out not in OUT_KINDS:
            raise ValueError(f"flexq: out must be one of {tuple(OUT_KINDS)}, got {out!r}")
        fcfg = config if isinstance(config, FusedConfig) else None
        if config is None and getattr(x, "ndim", 0) == 2:
            fcfg = choose_fused(x.shape[0], self.n, self.groups)
        if fcfg is not None:
            return self._fused(x, bits, out, fcfg, check_finite, y)
        cfg = config or choose_config(x.shape[0], self.n, self.groups)
        xp = self.quantize_activations(x, act_bits=bits, config=cfg, check_finite=check_finite)
        return self.matmul_planes(xp, out=out, config=cfg, y=y, _pdl=self.pdl_launch)
